"""Extension is one unit: a corruption, a metric, a source format and a detector adapter are
each one module that registers itself (here written to a temporary folder on ``sys.path``,
outside the package) and then work through the same public path as the built-in units; a
second unit under a taken name is refused. Every registry is restored afterwards
(:meth:`aegisbench.registry.Registry.scoped`).

Also: every kind of unit is a :class:`~aegisbench.registry.Registry` whose plug-ins are
declared by module name, and a declared plug-in module is imported on first read.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import cv2
import numpy as np
import polars as pl
import pytest

import aegisbench.corruptions as C
from _evalkit import gt_table, write_submission
from aegisbench import metrics as M
from aegisbench.builders.adapters import SourceSpec, load_source
from aegisbench.builders.source_kinds import SOURCE_FORMATS, SYNTHETIC_KINDS, check_source_kind
from aegisbench.builders.sources import materialize_source
from aegisbench.builders.source_table import split_counts
from aegisbench.corruptions.registry import _REGISTRY as CORRUPTIONS
from aegisbench.detectors.interface import DETECTORS, Detector, DetectorOptions, load_detector
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.tracks import TRACKS_REGISTRY
from aegisbench.params import SourceParams
from aegisbench.registry import Registry

FAST = EvaluationParams(bootstrap=BootstrapParams(n_resamples=50))

TOY_CORRUPTION = '''
import numpy as np
from aegisbench.corruptions.registry import corruption, get_spec

_like = get_spec("dust_haze")  # borrow a ladder; a real unit declares its own


@corruption("toy_invert", family=_like.family, params=_like.params_type, severities=dict(_like.severities),
            statistic=_like.statistic, targets=_like.targets, direction=_like.direction,
            fit_param=_like.fit_param, fit_bounds=_like.fit_bounds, modalities=("rgb",),
            modality_note="a toy: defined on visible-band frames")
def toy_invert(image, rng, params, px_per_kpx):
    """Photographic negative (a toy)."""
    return (255 - image).astype(np.uint8)
'''

TOY_METRIC = '''
from aegisbench.metrics.registry import HIGHER, metric


@metric(direction=HIGHER, label="Toy hits", bounds=(0, float("inf")), integer=True,
        description="True positives at the threshold, again (a toy).")
def toy_hits(ctx):
    return int(ctx.pooled[0])
'''

TOY_FORMAT = '''
import json
from aegisbench.builders.adapters_formats import ParseResult, _raw, list_images, locate
from aegisbench.builders.source_kinds import SOURCE_FORMATS


@SOURCE_FORMATS.register("toy_sidecar")
def read_toy_sidecar(root, mapper, spec):
    """Each image with a JSON sidecar of the same stem: [{"label": ..., "box": [x1, y1, x2, y2]}]."""
    res = ParseResult()
    for img in list_images(root):
        side = img.with_suffix(".json")
        image_id, split = locate(img, root)
        boxes, refs = [], []
        for k, obj in enumerate(json.loads(side.read_text()) if side.is_file() else []):
            if mapper((obj["label"],), str(side), f"object {k}") == spec.target_label:
                boxes.append(obj["box"])
                refs.append(f"object {k}")
        res.images.append(_raw(image_id, img, split, side if side.is_file() else None, boxes, refs))
    return res
'''

TOY_DETECTOR = '''
from aegisbench.detectors.interface import DETECTORS, Detector


class ToyDetector(Detector):
    """Predicts nothing (a toy)."""

    def __init__(self, kind, weights, options):
        super().__init__(options)
        self.name, self.weights = kind, weights

    def predict_windows(self, windows):
        import numpy as np
        from aegisbench.predictions import Detections
        return [Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32)) for _ in windows]


DETECTORS.add("toy_null", ToyDetector)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Write a module to a folder on ``sys.path``; import it (it registers itself)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def load(name: str, text: str):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        written.append(name)
        importlib.invalidate_caches()
        return importlib.import_module(name)

    yield load
    for name in written:
        sys.modules.pop(name, None)


def test_a_toy_corruption_is_listed_applied_and_unique(plugin):
    with CORRUPTIONS.scoped():
        toy = plugin("toy_corruption_unit", TOY_CORRUPTION)
        assert "toy_invert" in C.names() and C.corruption_families()["toy_invert"] == "earthquake"
        assert [c for c in C.list_conditions() if c.startswith("toy_")] == [f"toy_invert_s{s}" for s in C.SEVERITIES]
        img = np.full((24, 32, 3), 40, np.uint8)
        out = C.apply_condition("toy_invert_s2", img, key=("0.1.0", "demo", "img_1"))  # the built-ins' path
        assert (out == 215).all()
        assert C.get_spec("toy_invert").summary == "Photographic negative (a toy)."
        with pytest.raises(ValueError, match="already registered"):
            sys.modules.pop("toy_corruption_unit")
            plugin("toy_corruption_unit", TOY_CORRUPTION)
        assert toy.toy_invert is not None
    assert "toy_invert" not in C.names()


def test_a_toy_metric_is_computed_per_condition_and_unique(plugin, tmp_path, repo, index):
    folder = write_submission(tmp_path / "toy_sub", index, "sar", gt_table(index, "sar"), name="Toy model")
    with M.REGISTRY.scoped():
        plugin("toy_metric_unit", TOY_METRIC)
        assert "toy_hits" in [p.name for p in M.REGISTRY.producers("sar")]
        out = evaluate_submission(folder, repo, tmp_path / "results", FAST, verify=False)
        df = pl.read_parquet(out / "metrics.parquet")
        toy = {r["config"]: r["value"] for r in df.filter(pl.col("metric") == "toy_hits").iter_rows(named=True)}
        tp = {r["config"]: r["value"] for r in df.filter(pl.col("metric") == "tp").iter_rows(named=True)}
        assert toy and toy == tp  # every condition, by the same per-condition code as the built-ins
        with pytest.raises(ValueError, match="already registered"):
            sys.modules.pop("toy_metric_unit")
            plugin("toy_metric_unit", TOY_METRIC)
    assert "toy_hits" not in M.REGISTRY


def _toy_folder(root: Path) -> Path:
    for split, n in (("test", 2), ("val", 1)):
        (root / split).mkdir(parents=True)
        for i in range(n):
            cv2.imwrite(str(root / split / f"{split}_{i}.png"), np.full((40, 80, 3), 90 + i, np.uint8))
            (root / split / f"{split}_{i}.json").write_text(
                '[{"label": "person", "box": [30, 10, 50, 30]}, {"label": "tree", "box": [0, 0, 5, 5]}]')
    return root


def test_a_toy_source_format_reads_a_folder_and_is_unique(plugin, tmp_path):
    folder = _toy_folder(tmp_path / "toy_source")
    with SOURCE_FORMATS.scoped():
        plugin("toy_format_unit", TOY_FORMAT)
        assert check_source_kind("toy_sidecar", where="test") == "toy_sidecar"
        options = {"path": str(folder), "class_map": {"person": "person", "tree": None}, "target_label": "person",
                   "split_mode": "folders"}
        load = load_source(SourceSpec.from_options("toy", "toy_sidecar", options))
        assert sorted((r.split, r.boxes.tolist()) for r in load.records) == [
            ("test", [[30.0, 10.0, 50.0, 30.0]])] * 2 + [("val", [[30.0, 10.0, 50.0, 30.0]])]
        src = SourceParams(name="toy", track="sar", kind="toy_sidecar", options=options)
        table = materialize_source(src, "0.1.0", tmp_path / "sources")  # the sources stage's path
        assert split_counts(table)["test"] == 2 and split_counts(table)["val"] == 1
        with pytest.raises(ValueError, match="already registered"):
            sys.modules.pop("toy_format_unit")
            plugin("toy_format_unit", TOY_FORMAT)
    assert "toy_sidecar" not in SOURCE_FORMATS


def test_a_toy_detector_adapter_loads_by_name_and_is_unique(plugin):
    with DETECTORS.scoped():
        plugin("toy_detector_unit", TOY_DETECTOR)
        det = load_detector("toy_null", "none.pt", DetectorOptions(device="cpu"))
        assert isinstance(det, Detector) and det.name == "toy_null"
        (out,) = det.predict([np.zeros((32, 48, 3), np.uint8)])
        assert len(out.xyxy) == 0
        with pytest.raises(ValueError, match="already registered"):
            sys.modules.pop("toy_detector_unit")
            plugin("toy_detector_unit", TOY_DETECTOR)
    assert "toy_null" not in DETECTORS


@pytest.mark.parametrize("registry", [CORRUPTIONS, M.REGISTRY.specs, TRACKS_REGISTRY, DETECTORS, SOURCE_FORMATS,
                                      SYNTHETIC_KINDS], ids=lambda r: r.kind)
def test_every_kind_of_unit_is_a_registry_with_declared_plugins(registry):
    assert isinstance(registry, Registry) and registry.plugins and len(registry) > 0
    for module in registry.plugins:
        assert module in sys.modules  # read once: every declared plug-in module was imported


def test_a_declared_plugin_module_is_imported_on_first_read(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "toy_shapes_unit.py").write_text("from test_extension import SHAPES\nSHAPES.add('unit_disc', 3.14)\n")
    global SHAPES
    SHAPES = Registry("shape", plugins=("toy_shapes_unit",))
    try:
        assert "toy_shapes_unit" not in sys.modules
        assert SHAPES.names() == ("unit_disc",)
        SHAPES.freeze()
        with pytest.raises(RuntimeError, match="frozen"):
            SHAPES.add("unit_cube", 1.0)
    finally:
        sys.modules.pop("toy_shapes_unit", None)
