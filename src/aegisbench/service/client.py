"""``aegisbench submit``: upload a submission folder to a hosted leaderboard.

The token comes from ``AEGISBENCH_TOKEN``, else from the config file
(``$AEGISBENCH_CONFIG``, default ``~/.config/aegisbench/tokens.yaml``: a mapping of server URL
to token, or ``default: TOKEN``), which must not be readable by others; never from the command
line, where other users' ``ps`` would see it.

The folder is sent as the server's form: ``submission.yaml``, then ``predictions.parquet``
(or ``forecasts.parquet``), or the ``predictions/`` folder zipped (COCO ``<config>.json`` files
or the YOLO ``<config>/<split>/<image_id>.txt`` tree), and ``warp_patch.parquet`` and
``warp_noise.parquet`` when present.
The upload shows progress; the server's refusal is printed line by line (exit 2); an accepted
upload prints its id. ``--wait`` polls until the submission is final and prints the team's row.

>>> server_url("http://127.0.0.1:8000/")
'http://127.0.0.1:8000'
"""

from __future__ import annotations

import io
import os
import stat
import sys
import tempfile
import time
import zipfile
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

from aegisbench.errors import BadInput, printable
from aegisbench.readers import read_yaml

TOKEN_ENV, CONFIG_ENV = "AEGISBENCH_TOKEN", "AEGISBENCH_CONFIG"
FINAL = ("scored", "failed", "error")


def server_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"expected an http(s) URL such as http://127.0.0.1:8000, got {text[:200]!r}", where="--server")
    return text.rstrip("/")


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or Path.home() / ".config" / "aegisbench" / "tokens.yaml")


def find_token(server: str) -> str:
    """The token for ``server`` (see the module doc); BadInput saying where to put one."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    path = config_path()
    if path.is_file():
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise BadInput(f"the token file is readable by others (mode {stat.S_IMODE(mode):o}): chmod 600 it",
                           where=str(path))
        raw = read_yaml(path, "token file")
        if isinstance(raw, dict):
            value = raw.get(server) or raw.get(server + "/") or raw.get("default")
            if isinstance(value, str) and value.strip():
                return value.strip()
    raise BadInput(f"no token: set {TOKEN_ENV}, or add `{server}: TOKEN` to {path} (chmod 600); the token is never "
                   "taken from the command line", where="submit")


class _Counting(io.RawIOBase):
    """A file that reports the bytes read from it (the upload's progress)."""

    def __init__(self, fh, bar):
        self._fh, self._bar = fh, bar

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self._bar.update(len(data))
        return data

    def fileno(self) -> int:
        return self._fh.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()


def package(folder: Path, stack: ExitStack) -> list[tuple[str, str, Path]]:
    """The form parts of a submission folder: ``(field, file name, path)``; a ``predictions/``
    folder is zipped into a temporary file."""
    from aegisbench.evaluation.submission import META_FILE, PARQUET_FILE, PRED_DIR, WARP_PATCH_FILE
    from aegisbench.vocab import WARP_NOISE_FILE
    from aegisbench.service.uploads import FORECASTS_FILE
    if not (folder / META_FILE).is_file():
        raise BadInput(f"no {META_FILE}", where=str(folder))
    parts = [("submission", META_FILE, folder / META_FILE)]
    found = [n for n in (PARQUET_FILE, FORECASTS_FILE) if (folder / n).is_file()]
    if (folder / PRED_DIR).is_dir():
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="aegisbench-submit-"))) / "predictions.zip"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted((folder / PRED_DIR).rglob("*")):
                if path.is_symlink():
                    raise BadInput("symbolic links are not sent", where=str(path))
                if path.is_file():
                    zf.write(path, path.relative_to(folder / PRED_DIR).as_posix())
        found.append(PRED_DIR)
        parts.append(("predictions", "predictions.zip", tmp))
    else:
        parts += [("predictions", n, folder / n) for n in found]
    if len(found) != 1:
        raise BadInput(f"expected exactly one of {PARQUET_FILE}, {FORECASTS_FILE} or {PRED_DIR}/, found {found}",
                       where=str(folder))
    for name, file in (("warp_patch", WARP_PATCH_FILE), ("warp_noise", WARP_NOISE_FILE)):
        if (folder / file).is_file():
            parts.append((name, file, folder / file))
    return parts


def _first_contact(http, server: str, err, patience: float = 30.0):
    """``GET /api/v1/limits``, waiting up to ``patience`` seconds for a server that is starting."""
    import httpx
    deadline = time.monotonic() + patience
    while True:
        try:
            return http.get("/api/v1/limits")
        except httpx.ConnectError as exc:
            if time.monotonic() > deadline:
                print(f"aegisbench submit: error: {server}: no server answers ({exc})", file=err)
                return None
            time.sleep(0.5)


def _refusal(resp) -> list[str]:
    try:
        body = resp.json()
        lines = body.get("problems") or [body.get("error") or resp.text]
    except ValueError:
        lines = [resp.text.strip() or resp.reason_phrase]
    return [printable(f"{line}", 1000) for line in lines]


def submit(folder: str | Path, server: str, *, wait: bool = False, timeout: float = 3600.0,
           poll: float = 2.0, out=sys.stdout, err=sys.stderr) -> int:
    """Upload ``folder``; 0 accepted (and, with ``wait``, scored), 2 refused or failed, 1 an
    error of ours or a timeout."""
    import httpx

    from aegisbench.progress import progress
    server = server_url(server)
    token = find_token(server)
    folder = Path(folder)
    headers = {"Authorization": f"Bearer {token}"}
    with ExitStack() as stack, httpx.Client(base_url=server, headers=headers, timeout=httpx.Timeout(60.0)) as http:
        parts = package(folder, stack)
        total = sum(p.stat().st_size for _, _, p in parts)
        limits = _first_contact(http, server, err)
        if limits is None:
            return 1
        if limits.status_code >= 400:  # a wrong token is refused before anything is uploaded
            for line in _refusal(limits):
                print(line, file=err)
            return 2 if limits.status_code < 500 else 1
        if total > limits.json().get("max_upload_bytes", total):
            print(f"aegisbench submit: error: {folder}: {total} bytes, larger than the server's limit of "
                  f"{limits.json()['max_upload_bytes']}", file=err)
            return 2
        with progress(total, f"upload {folder.name}", unit="B") as bar:
            files = [(field, (name, _Counting(stack.enter_context(open(path, "rb")), bar)))
                     for field, name, path in parts]
            try:
                resp = http.post("/api/v1/submissions", files=files,
                                 timeout=httpx.Timeout(60.0, write=None, read=600.0))
            except httpx.HTTPError as exc:
                print(f"aegisbench submit: error: {server}: {type(exc).__name__}: {exc}", file=err)
                return 1
        if resp.status_code >= 400:
            for line in _refusal(resp):
                print(line, file=err)
            return 2 if resp.status_code < 500 else 1
        body = resp.json()
        sid = body["id"]
        print(f"{sid} {'already submitted' if body.get('duplicate') else 'accepted'}: {body['status']}", file=out)
        if not wait:
            return 0
        return _wait(http, sid, timeout, poll, out, err)


def _wait(http, sid: str, timeout: float, poll: float, out, err) -> int:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        row = http.get(f"/api/v1/submissions/{sid}").json()
        if row["status"] != status:
            status = row["status"]
            print(f"{sid}: {status}", file=err)
        if row["status"] in FINAL and (row["status"] != "scored" or row.get("revision") is not None):
            break  # scored: also on the board (published)
        time.sleep(poll)
    else:
        print(f"aegisbench submit: error: {sid} is still {status} after {timeout:g} s", file=err)
        return 1
    if row["status"] != "scored":
        print(f"{sid}: {row['status']}: {row.get('message') or ''}", file=err)
        return 2 if row["status"] == "failed" else 1
    line = http.get(f"/api/v1/submissions/{sid}/row").json()
    for r in line["rows"]:
        print(f"{sid} {r['source']} {r['metric']}: clean {r['clean_text']}; floor {r['floor_text']} at "
              f"{', '.join(r['at'])}", file=out)
    if not line.get("standing"):
        print(f"{sid}: scored, not standing on the board (another submission of the team stands)", file=out)
    return 0
