"""``aegisbench pull`` / ``push``: the pipeline's outputs from / to the project's DVC remote,
with the remote checked first.

``dvc pull`` against a remote it cannot reach (a shared folder that is not mounted, a host
that does not answer, a bucket without credentials) fails with DVC's own multi-line error and
exit status 1, after it has started checking out. These commands resolve the remote the way
DVC does (``.dvc/config`` and ``config.local``, the default remote unless ``--remote`` names
one), ask its file system whether the remote's folder is there, and refuse in one line with
exit 2 before anything is fetched, uploaded or checked out. Then they run ``dvc pull`` /
``dvc push`` itself; its failure becomes one line and exit 2 as well. ``pull`` then verifies
the dataset repo it brought (re-hash and re-decode, as ``aegisbench verify``).

>>> describe_failure("Collecting\\nERROR: failed to pull data from the cloud - no such file\\n")
'failed to pull data from the cloud - no such file'
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteTarget:
    """A DVC remote as DVC resolved it: its name, configured URL, file system and path."""

    name: str
    url: str
    fs: object
    path: str


def resolve_remote(root: str | Path, name: str | None = None) -> RemoteTarget:
    """The remote ``name`` (default: the project's default remote) of the DVC project at
    ``root``; BadInput when the project has none, or its configuration cannot be used."""
    from dvc.config import NoRemoteError
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    config = Path(root) / ".dvc" / "config"
    try:
        with Repo(str(root)) as repo:
            try:
                remote = repo.cloud.get_remote(name, "pull")
            except NoRemoteError:
                raise BadInput("no DVC remote is configured: add one with `dvc remote add -d NAME URL` (README, "
                               "'Pulling the built data')", where=str(config)) from None
            url = str(repo.config["remote"].get(remote.name, {}).get("url", remote.path))
            return RemoteTarget(remote.name, url, remote.fs, remote.path)
    except BadInput:
        raise
    except ImportError as exc:  # a remote kind whose DVC plugin is not installed (dvc-s3, dvc-ssh, ...)
        raise BadInput(f"{_one_line(str(exc))} (pip install \"dvc[KIND]\", e.g. dvc[s3])", where=str(config)) from None
    except DvcException as exc:  # not a DVC project, an unknown remote name, a malformed config
        raise BadInput(_one_line(str(exc)), where=str(config if config.is_file() else root)) from None


def check_reachable(remote: RemoteTarget, for_push: bool = False) -> None:
    """BadInput unless the remote's folder exists (for a push: it, or its parent folder,
    which ``dvc push`` creates it in). Any error of the remote's file system counts as
    unreachable: DVC's remotes raise their own kinds (network, auth, missing bucket)."""
    where = f"remote {remote.name!r} ({remote.url})"
    fs = remote.fs
    try:
        if fs.exists(remote.path):
            return
        if for_push and fs.exists(fs.parent(remote.path)):
            return
    except Exception as exc:  # noqa: BLE001 - every backend raises its own error types
        raise BadInput(f"unreachable: {type(exc).__name__}: {_one_line(str(exc))}", where=where) from None
    what = "neither it nor its parent folder exists" if for_push else "its folder does not exist"
    raise BadInput(f"unreachable: {what} (not mounted, or the wrong URL?); nothing was transferred", where=where)


def describe_failure(output: str) -> str:
    """DVC's error of a failed command, whole, in one line: from its first ``ERROR:`` line to
    the end (the targets it could not check out, its hint; not its "Having any troubles?"
    footer), else its last non-empty line.

    >>> describe_failure("WARNING: x\\nERROR: failed to pull - Checkout failed for following targets:\\n"
    ...                  "data/a\\ndata/b\\nIs your cache up to date?\\n")
    'failed to pull - Checkout failed for following targets: data/a data/b Is your cache up to date?'
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), None)
    if start is None:
        return _one_line(lines[-1] if lines else "no output")
    kept = [line.removeprefix("ERROR:").strip() for line in lines[start:] if not line.startswith("Having any troubles?")]
    return _one_line(" ".join(kept))


def transfer(root: str | Path, verb: str, remote: RemoteTarget, jobs: int | None = None) -> None:
    """``dvc pull`` / ``dvc push`` from / to ``remote`` in ``root`` (DVC's stdout passed on);
    BadInput with DVC's error line when it fails."""
    if verb not in ("pull", "push"):
        raise ValueError(f"verb must be 'pull' or 'push', got {verb!r}")
    cmd = [sys.executable, "-m", "dvc", verb, "-r", remote.name, *(["--jobs", str(jobs)] if jobs else [])]
    log.info("%s: %s", remote.name, " ".join(cmd[2:]))
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadInput(f"dvc {verb} failed (exit {proc.returncode}): {describe_failure(proc.stderr + proc.stdout)}",
                       where=f"remote {remote.name!r} ({remote.url})")
    for line in proc.stdout.splitlines():
        if line.strip():
            log.info("%s", line.strip())


def _one_line(text: str) -> str:
    return " ".join(text.split())
