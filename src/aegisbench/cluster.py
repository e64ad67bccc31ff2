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
import os
import re
import socket
import sys
import threading
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
    if spec is not None and spec.origin is None:  # a namespace package: a folder named aegisbench on the path
        spec = None                               # (the project's dataset repo in the working directory), not the package
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


# ------------------------------------------------------------------ reaching the cluster
CONNECT_TIMEOUT_S = 5.0
#: How long the first GCS call to a ``--ray-address`` may take (a live GCS answers in milliseconds;
#: Ray's own connect warning comes at 5 s, its next at 10 s).
GCS_TIMEOUT_S = 6.0


def probe_address(address: str) -> str:
    """``HOST:PORT`` of ``address`` (``auto`` resolved); BadInput at once when nothing
    listens there: Ray itself retries for minutes."""
    from ray._private import services

    if address.startswith("ray://"):
        target = address[len("ray://"):]
    else:
        try:
            target = services.canonicalize_bootstrap_address(address)
        except ConnectionError as exc:
            raise BadInput(f"no running Ray cluster found ({exc})".replace("\n", " "), where="--ray-address") from None
        if target is None:
            raise BadInput("no running Ray cluster found", where="--ray-address")
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:  # named as given; Ray may have resolved 127.0.0.1 to this node's address
        seen = f"{target}: " if target != address else ""
        raise BadInput(f"cannot reach a Ray cluster at {address} ({seen}{exc.strerror or exc})",
                       where="--ray-address") from None
    return target


def _ray_reason(text: str) -> str:
    """Ray's last log line in ``text`` without its ``[time level pid tid] file.cc:N:`` prefix."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return re.sub(r"^\[[^\]]*\]\s*[\w.]+:\d+:\s*", "", lines[-1]) if lines else ""


def check_gcs(target: str, address: str | None = None) -> None:
    """BadInput when the cluster at ``target`` refuses this process's token (wrong, expired,
    missing): one GCS call (Ray itself retries for 20 s), its C++ warning kept off stderr.
    BadInput as well, naming ``address`` as given and Ray's own reason, when no Ray GCS
    answers there within :data:`GCS_TIMEOUT_S` (something else listens on the port: Ray
    would wait 40 s here and then retry in ``ray.init`` without end)."""
    if target.startswith("ray://"):
        return
    import tempfile

    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    outcome: list = []

    def call() -> None:
        try:
            GcsClient(address=target)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - judged below, in the caller's thread
            outcome.append(exc)

    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            sys.stderr.flush()
            os.dup2(sink.fileno(), 2)
            try:
                thread = threading.Thread(target=call, name="ray-gcs-check", daemon=True)
                thread.start()  # (GcsClient waits with the GIL released: a daemon left waiting ends with us)
                thread.join(GCS_TIMEOUT_S)
            finally:
                os.dup2(saved, 2)
            sink.seek(0)
            said = _ray_reason(sink.read(64 * 1024).decode("utf-8", "replace"))
    finally:
        os.close(saved)
    shown = address or target
    seen = f"{target}: " if target != shown else ""
    if not outcome:
        raise BadInput(f"cannot reach a Ray cluster at {shown} ({seen}no Ray GCS answered within {GCS_TIMEOUT_S:g} s"
                       f"{'; Ray: ' + said if said else ''})", where="--ray-address")
    exc = outcome[0]
    if isinstance(exc, AuthenticationError):
        raise BadInput("the Ray cluster refused this process's token (token authentication: the cluster's "
                       "token in RAY_AUTH_TOKEN or ~/.ray/auth_token, and RAY_AUTH_MODE=token)",
                       where=target) from None
    if exc is not None and "Timed out while waiting for GCS" in str(exc):
        raise BadInput(f"cannot reach a Ray cluster at {shown} ({seen}{type(exc).__name__}: {str(exc).strip()})",
                       where="--ray-address") from None
    if exc is not None:  # anything else: ray.init reports it
        log.debug("GCS check of %s: %s", target, exc)
