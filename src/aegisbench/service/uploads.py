"""An upload's parts turned into a submission folder, within declared limits.

The multipart form (the API's and the team page's) has three fields:

* ``submission``: the ``submission.yaml`` (at most 1 MiB, UTF-8, read with the project's YAML
  reader: no duplicate keys, bounded nesting and aliases). Its ``team`` is replaced by the
  token's team, whatever the file says;
* ``predictions``: one ``.parquet`` (detection predictions, or fire-spread forecasts on the
  ``firespread`` track), one ``.zip`` (COCO results ``<config>.json`` files, or YOLO
  ``<config>/<split>/<image_id>.txt`` files, optionally under one ``predictions/`` folder), or
  one or more COCO results files ``<config>.json``;
* ``warp_patch`` and ``warp_noise`` (optional, smoke track): ``warp_patch.parquet`` and
  ``warp_noise.parquet``, the two WARP tests.

Nothing the uploader names becomes a path: the folder is named by the server, a Parquet file
gets its contract name, a COCO file keeps only a config-like base name, and a zip member is
refused when its name is absolute, holds ``..``, a backslash or a control character, or
starts a component with ``.``; when it is a symbolic link, encrypted or a duplicate; when the
archive holds more members than ``max_zip_members``, or expands beyond ``max_expanded_bytes``
or ``max_zip_ratio`` times its own size (counted while decompressing, not trusted from the
header). Every refusal is an :class:`UploadRefused` with one line naming the part or member.

>>> member_path("predictions/clean/sar_val/img_1.txt")
('clean', 'sar_val', 'img_1.txt')
>>> member_path("../etc/passwd")
Traceback (most recent call last):
...
aegisbench.service.uploads.UploadRefused: zip member '../etc/passwd': '..' is not allowed in a member name
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import yaml

from aegisbench.errors import BadInput
from aegisbench.evaluation.submission import META_FILE, META_MAX_BYTES, PARQUET_FILE, PRED_DIR, WARP_PATCH_FILE
from aegisbench.vocab import WARP_NOISE_FILE
from aegisbench.readers import load_yaml
from aegisbench.service.rules import HostingRules
from aegisbench.vocab import FIRESPREAD

FIELDS = ("submission", "predictions", "warp_patch", "warp_noise")
FORECASTS_FILE = "forecasts.parquet"
_COCO_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,127}\.json")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
CHUNK = 1 << 20


class UploadRefused(BadInput):
    """An upload that is refused before validation; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400, where: str | None = None):
        super().__init__(message, where=where)
        self.status = status


@dataclass(frozen=True)
class Part:
    """One file part of the form: its field, the name the client gave it, and its bytes."""

    field: str
    filename: str
    file: BinaryIO  # seekable
    size: int


def _copy(src: BinaryIO, dest: Path, limit: int, what: str, status: int = 413) -> int:
    """Copy at most ``limit`` bytes into the new file ``dest``; refuse (``status``) when there are more."""
    n = 0
    with open(dest, "xb") as out:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            n += len(chunk)
            if n > limit:
                raise UploadRefused(f"{what} is larger than {limit} bytes", status=status)
            out.write(chunk)
    return n


def read_meta_part(part: Part, team: str) -> tuple[dict, bytes, object]:
    """The checked mapping of an uploaded ``submission.yaml`` with ``team`` set to the
    token's team, the bytes to store, and the ``team`` the file said (None: none)."""
    if part.size > META_MAX_BYTES:
        raise UploadRefused(f"submission.yaml is {part.size} bytes, larger than the limit of {META_MAX_BYTES}",
                            status=413)
    part.file.seek(0)
    data = part.file.read(META_MAX_BYTES + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UploadRefused(f"submission.yaml is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        raw = load_yaml(text, META_FILE)
    except BadInput as exc:
        raise UploadRefused(exc.message, where=META_FILE) from None
    if not isinstance(raw, dict):
        raise UploadRefused("must be a mapping of fields", where=META_FILE)
    raw = dict(raw)
    said = raw.get("team")
    raw["team"] = team
    out = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=100).encode("utf-8")
    return raw, out, said


def member_path(name: str) -> tuple[str, ...]:
    """The checked components of a zip member name, a leading ``predictions/`` dropped."""
    where = f"zip member {name[:200]!r}"
    if not name or "\x00" in name or _CONTROL.search(name):
        raise UploadRefused("control characters are not allowed in a member name", where=where)
    if "\\" in name:
        raise UploadRefused("backslashes are not allowed in a member name (use '/')", where=where)
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise UploadRefused("absolute member names are not allowed", where=where)
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UploadRefused("'..' is not allowed in a member name", where=where)
    if any(p.startswith(".") for p in parts):
        raise UploadRefused("hidden names (starting with '.') are not prediction files", where=where)
    if parts and parts[0] == PRED_DIR:
        parts = parts[1:]
    if len(parts) > 3:
        raise UploadRefused("nested too deep: COCO files are <config>.json, YOLO files "
                            "<config>/<split>/<image_id>.txt", where=where)
    return tuple(parts)


def extract_zip(part: Part, dest: Path, rules: HostingRules) -> int:
    """Extract the checked members of an uploaded zip under ``dest``; returns the files written."""
    part.file.seek(0)
    try:
        zf = zipfile.ZipFile(part.file)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UploadRefused(f"not a readable zip archive ({exc})", where=part.filename[:200]) from None
    with zf:
        infos = zf.infolist()
        if len(infos) > rules.max_zip_members:
            raise UploadRefused(f"the archive holds {len(infos)} members, more than the limit of "
                                f"{rules.max_zip_members}", where=part.filename[:200])
        cap = min(rules.max_expanded_bytes, int(rules.max_zip_ratio * max(part.size, 1)))
        declared = sum(i.file_size for i in infos)
        if declared > cap:
            raise UploadRefused(f"the archive declares {declared} bytes expanded, more than the limit of {cap} "
                                f"({rules.max_zip_ratio:g} x its size, at most {rules.max_expanded_bytes})",
                                where=part.filename[:200])
        seen, written, total = set(), 0, 0
        for info in infos:
            where = f"zip member {info.filename[:200]!r}"
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise UploadRefused("symbolic links are not accepted", where=where)
            if info.flag_bits & 0x1:
                raise UploadRefused("encrypted members are not accepted", where=where)
            parts = member_path(info.filename)
            if info.is_dir() or not parts:
                continue
            if parts in seen:
                raise UploadRefused("the archive holds this name twice", where=where)
            seen.add(parts)
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src:
                try:
                    n = _copy(src, target, min(info.file_size, cap - total), f"{where} expanded", status=400)
                except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                    raise UploadRefused(f"cannot be decompressed ({exc})", where=where) from None
            total += n
            written += 1
    return written


def stage_upload(parts: list[Part], folder: Path, team: str, rules: HostingRules) -> tuple[dict, object]:
    """Write the parts of one upload as a submission folder at ``folder`` (new, named by the
    server); returns the uploaded ``submission.yaml`` mapping with ``team`` replaced, and the
    ``team`` the file said."""
    if len(parts) > rules.max_files:
        raise UploadRefused(f"{len(parts)} files in one upload, more than the limit of {rules.max_files}")
    by_field: dict[str, list[Part]] = {}
    for p in parts:
        if p.field not in FIELDS:
            raise UploadRefused(f"unknown form field {p.field[:80]!r} (expected {', '.join(FIELDS)})")
        by_field.setdefault(p.field, []).append(p)
    metas = by_field.get("submission", [])
    if len(metas) != 1:
        raise UploadRefused("give exactly one submission.yaml in the field 'submission'")
    preds = by_field.get("predictions", [])
    if not preds:
        raise UploadRefused("no predictions: give a .parquet, a .zip or COCO <config>.json files in the field "
                            "'predictions'")
    raw, meta_bytes, said = read_meta_part(metas[0], team)
    folder.mkdir(parents=True)
    (folder / META_FILE).write_bytes(meta_bytes)
    limit = rules.max_expanded_bytes
    kinds = {_kind(p) for p in preds}
    if len(kinds) > 1 or (kinds & {"parquet", "zip"} and len(preds) > 1):
        raise UploadRefused("predictions come in one form: one .parquet, one .zip, or COCO <config>.json files")
    kind = kinds.pop()
    if kind == "parquet":
        name = FORECASTS_FILE if raw.get("track") == FIRESPREAD else PARQUET_FILE
        preds[0].file.seek(0)
        _copy(preds[0].file, folder / name, limit, name)
    elif kind == "zip":
        (folder / PRED_DIR).mkdir()
        if extract_zip(preds[0], folder / PRED_DIR, rules) == 0:
            raise UploadRefused("the archive holds no prediction file", where=preds[0].filename[:200])
    else:
        (folder / PRED_DIR).mkdir()
        for p in preds:
            base = os.path.basename(p.filename.replace("\\", "/"))
            if not _COCO_NAME.fullmatch(base):
                raise UploadRefused("a COCO results file is named <config>.json (letters, digits, '_')",
                                    where=p.filename[:200])
            if (folder / PRED_DIR / base).exists():
                raise UploadRefused("given twice", where=base)
            p.file.seek(0)
            _copy(p.file, folder / PRED_DIR / base, limit, base)
    for name, file in (("warp_patch", WARP_PATCH_FILE), ("warp_noise", WARP_NOISE_FILE)):
        for p in by_field.get(name, []):
            if _kind(p) != "parquet" or len(by_field[name]) > 1:
                raise UploadRefused(f"{name} is one .parquet file")
            p.file.seek(0)
            _copy(p.file, folder / file, limit, file)
    return raw, said


def _kind(part: Part) -> str:
    name = part.filename.lower()
    for ext in ("parquet", "zip", "json"):
        if name.endswith("." + ext):
            return ext
    raise UploadRefused("predictions are .parquet, .zip or COCO .json files", where=part.filename[:200] or part.field)


def remove_tree(path: Path) -> None:
    """Remove ``path`` (read-only files and folders included); no error when absent."""
    if not path.exists():
        return
    os.chmod(path, 0o700)
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o700)
    shutil.rmtree(path)
