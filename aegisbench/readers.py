"""Reading user-supplied YAML and JSON files: a missing or malformed file is a BadInput
that names it. YAML is always read with ``safe_load`` (no object construction).

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.yaml"
>>> _ = p.write_text("a: 1")
>>> read_yaml(p, "params file")
{'a': 1}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from aegisbench.errors import BadInput


def _text(path: Path, what: str) -> str:
    if not path.is_file():
        raise BadInput(f"{what} not found", where=str(path))
    return path.read_text()


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    path = Path(path)
    try:
        return yaml.safe_load(_text(path, what))
    except yaml.YAMLError as exc:
        raise BadInput(f"malformed YAML: {exc}", where=str(path)) from None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    path = Path(path)
    try:
        return json.loads(_text(path, what))
    except json.JSONDecodeError as exc:
        raise BadInput(f"malformed JSON ({exc})", where=str(path)) from None
