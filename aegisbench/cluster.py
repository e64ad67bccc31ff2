"""Preflight of a Ray cluster: every alive node runs what the driver runs and sees its data.

Before a command started with ``--ray-address`` writes anything, :func:`preflight` runs one
tiny task pinned to each alive node (``NodeAffinitySchedulingStrategy``, no CPU asked) that
reports the node's Python, Ray and aegisbench versions (the package's version and a digest
of its source files), the versions of the libraries the built bytes depend on, and which of
the command's data paths it cannot see. The first node that differs from the driver is a
:class:`~aegisbench.errors.BadInput` naming it (``node HOST:PORT (id)``), so the command exits
2 with one line. The probe is shipped by value, so a node without aegisbench answers too.

>>> facts = node_facts([__file__, "/no/such/path"])
>>> facts["missing"]
['/no/such/path']
>>> differences(dict(facts, python="2.7.18"), facts)
['python 2.7.18 (driver: ...)', 'cannot see /no/such/path']
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

#: Distributions whose versions must match the driver's (the built bytes depend on them).
LIBRARIES = ("numpy", "pyarrow", "opencv-python", "opencv-python-headless", "torch", "datasets")
PREFLIGHT_TIMEOUT_S = 120.0


def node_facts(paths: list[str]) -> dict:
    """What this process runs (versions, aegisbench source digest) and which ``paths`` it
    cannot see. Self-contained (imports inside) so it runs, shipped by value, on a node
    where aegisbench is not importable."""
    import hashlib
    import importlib.metadata as md
    import importlib.util
    import os
    import platform

    def dist(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    spec = importlib.util.find_spec("aegisbench")
    code = None
    if spec is not None and spec.origin:
        h = hashlib.sha256()
        root = os.path.dirname(spec.origin)
        for dirpath, dirnames, files in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith((".py", ".yaml", ".j2"))):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
        code = h.hexdigest()[:12]
    return {"python": platform.python_version(), "ray": dist("ray"),
            "aegisbench": None if spec is None else f"{dist('aegisbench')} (code {code})",
            "libraries": {n: dist(n) for n in LIBRARIES},
            "missing": [p for p in paths if not os.path.exists(p)]}


def differences(node: dict, driver: dict) -> list[str]:
    """What ``node`` runs differently from ``driver``, and the paths it cannot see.

    >>> differences({"python": "3.11.7", "missing": ["/d"]}, {"python": "3.11.7", "missing": []})
    ['cannot see /d']
    """
    out = []
    for key in ("python", "ray", "aegisbench"):
        if node.get(key) != driver.get(key):
            out.append(f"{key} {node.get(key) or 'not installed'} (driver: {driver.get(key)})")
    libs, mine = node.get("libraries", {}), driver.get("libraries", {})
    out += [f"{n} {libs.get(n) or 'not installed'} (driver: {mine.get(n) or 'not installed'})"
            for n in sorted(set(libs) | set(mine)) if libs.get(n) != mine.get(n)]
    out += [f"cannot see {p}" for p in node.get("missing", [])]
    return out


def visible_paths(paths: Iterable[str | Path]) -> list[str]:
    """Absolute forms of ``paths``; one that does not exist yet (an output folder) stands
    for its nearest existing ancestor, which the nodes must see to write it."""
    out = []
    for p in paths:
        q = Path(p).absolute()
        while not q.exists() and q.parent != q:
            q = q.parent
        if str(q) not in out:
            out.append(str(q))
    return out


def node_name(node: dict) -> str:
    """``node HOST:PORT (id prefix)``: on one machine several nodes share the host."""
    return f"node {node['NodeManagerAddress']}:{node['NodeManagerPort']} ({node['NodeID'][:12]})"


def preflight(paths: Iterable[str | Path] = ()) -> dict[str, str]:
    """Check every alive node of the connected Ray cluster against this process; the map of
    node id -> :func:`node_name` when all agree, else BadInput naming the first that differs."""
    import ray
    from ray import cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    wanted = visible_paths(paths)
    driver = node_facts(wanted)
    if driver["missing"]:
        raise BadInput(f"cannot see {driver['missing'][0]}", where="this machine")
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    cloudpickle.register_pickle_by_value(__import__(__name__, fromlist=["node_facts"]))
    try:
        probe = ray.remote(num_cpus=0, max_retries=0)(node_facts)
        refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
                              name="aegisbench_preflight").remote(wanted) for n in nodes]
    finally:
        cloudpickle.unregister_pickle_by_value(__import__(__name__, fromlist=["node_facts"]))
    names = {n["NodeID"]: node_name(n) for n in nodes}
    for node, ref in zip(nodes, refs):
        try:
            facts = ray.get(ref, timeout=PREFLIGHT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - a node that cannot run the probe at all
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
            raise BadInput(f"the preflight task failed there: {first}", where=names[node["NodeID"]]) from None
        diff = differences(facts, driver)
        if diff:
            raise BadInput("; ".join(diff), where=names[node["NodeID"]])
    log.info("Ray cluster: %d node(s) run this aegisbench and see %s", len(nodes), ", ".join(wanted) or "no paths")
    return names
