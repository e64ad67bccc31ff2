"""docs/ARCHITECTURE.md says what the code does: its layer table is the one the imports give,
every module file and dotted name it cites exists, and every registry it names is a Registry."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from aegisbench.importgraph import import_graph
from aegisbench.layering import layers
from aegisbench.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "aegisbench"
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end > 0 else None]


def test_the_layer_table_is_the_one_the_imports_give():
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)/?`", _section("Rooms and layers"), flags=re.M)
    assert rows, "no layer table found"
    documented = {folder: int(n) for n, folder in rows}
    assert documented == layers(import_graph())


def _cited_files(text: str) -> set[str]:
    """Module files cited as `folder/name.py` or `name.py` (relative to the package)."""
    return set(re.findall(r"`((?:[a-z_]+/)?[a-z_]+\.py)`", text))


def test_every_cited_module_file_exists():
    missing = []
    for rel in sorted(_cited_files(DOC)):
        if rel.startswith(("tests/", "scripts/")):
            path = ROOT / rel
        else:
            path = PACKAGE / rel
            if not path.exists():  # `name.py` inside the folder a table row or sentence is about
                path = next(iter(PACKAGE.glob(f"*/{rel}")), path)
        if not path.exists():
            missing.append(rel)
    assert not missing, f"docs/ARCHITECTURE.md cites files that do not exist: {missing}"


@pytest.mark.parametrize("module, name", [
    ("aegisbench.corruptions.registry", "_REGISTRY"), ("aegisbench.metrics.registry", "REGISTRY"),
    ("aegisbench.evaluation.tracks", "TRACKS_REGISTRY"), ("aegisbench.detectors.interface", "DETECTORS"),
    ("aegisbench.builders.source_kinds", "SOURCE_FORMATS"), ("aegisbench.builders.source_kinds", "SYNTHETIC_KINDS"),
    ("aegisbench.dataset.families", "FAMILIES"), ("aegisbench.builders.families", "PLANNERS"),
])
def test_every_registry_in_the_table_is_a_registry(module, name):
    assert f"`{name}`" in _section("Registries and how to add a unit") or name == "_REGISTRY"
    unit = getattr(importlib.import_module(module), name)
    registry = unit.specs if hasattr(unit, "specs") else unit  # the metric registry wraps two
    assert isinstance(registry, Registry) and len(registry) > 0


def test_cited_dotted_names_exist():
    names = set(re.findall(r"`(dataset\.[a-z_]+\.[A-Za-z_]+|vocab\.[A-Z_]+|errors\.[A-Za-z]+)`", DOC))
    assert names, "no dotted names found"
    for dotted in sorted(names):
        module, attr = dotted.rsplit(".", 1)
        assert hasattr(importlib.import_module(f"aegisbench.{module}"), attr), dotted
