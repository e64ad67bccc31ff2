"""Sensor modality: every corruption declares the sensors its physics holds for; a thermal
source gets no split of a config that is not physical for it, the manifest and card say
so ("n/a (not physical for thermal)"), and evaluate emits null rows noted with the reason;
the preview grid, the leaderboard's heat maps, curves, gallery and Markdown show only the
conditions built for each source, the others in one note per source.
Also: a source without a clean val split (an older or external repo) is skipped with
noted null rows, the other sources are scored; only a track with no val at all is refused."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import datasets
import polars as pl
import pytest
import yaml

import aegisbench.corruptions as C
from _evalkit import gt_table, write_submission
from aegisbench.dataset.card import card_inputs, render_card
from aegisbench.hashing import file_sha256
from aegisbench.builders.build import build_repo
from aegisbench.dataset.manifest import MANIFEST, dataset_digest, load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.builders.sources import materialize_source
from aegisbench.cli import main
from aegisbench.corruptions.registry import corruption, perturbation
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.params import Params
from aegisbench.vocab import MODALITIES, THERMAL

FAST = EvaluationParams(bootstrap=BootstrapParams(n_resamples=50))
SAR_OPTS = {"n_train": 0, "n_val": 1, "n_test": 2, "images_per_flight": 1,
            "small_size": [256, 256], "large_size": [400, 300]}
CONDITIONS = ["low_light_s1", "motion_blur_s1"]
COMPOUND = ["motion_blur_s1+low_light_s1"]  # one part not physical for thermal: the whole compound is not
NOT_PHYSICAL = "not physical for thermal"


def _params(tmp: Path, sources: dict, conditions=CONDITIONS, compound=COMPOUND) -> Params:
    return Params.from_dict(_raw(tmp, sources, conditions, compound))


def _raw(tmp: Path, sources: dict, conditions=CONDITIONS, compound=COMPOUND) -> dict:
    return {
        "benchmark_version": "0.1.0",
        "paths": {"sources": str(tmp / "sources"), "dataset": str(tmp / "repo")},
        "build": {"rows_per_shard": 2, "conditions": list(conditions), "compound": list(compound)},
        "sources": {name: {"track": "sar", "kind": "synthetic_sar", "license": "mit", "modality": modality,
                           "options": SAR_OPTS} for name, modality in sources.items()},
    }


def _build(tmp: Path, sources: dict, **kw) -> Path:
    params = _params(tmp, sources, **kw)
    for src in params.sources:
        materialize_source(src, params.benchmark_version, params.sources_dir)
    build_repo(params, progress=False)
    return tmp / "repo"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """An rgb and a thermal source of the sar track."""
    return _build(tmp_path_factory.mktemp("modality"), {"rgb_sar": "rgb", "thermal_sar": THERMAL})


# ------------------------------------------------------------------ registry


def test_every_registry_entry_declares_modalities_with_a_reason():
    for name in C.names(kind=None):
        spec = C.get_spec(name, kind=None)
        assert spec.modalities and set(spec.modalities) <= set(MODALITIES), name
        assert len(set(spec.modalities)) == len(spec.modalities), name
        assert len(spec.modality_note.split()) >= 5, name
    thermal = {n for n in C.names() if THERMAL in C.get_spec(n).modalities}
    assert thermal == {"inundation", "rain_streaks", "motion_blur"}  # visible-band physics stays rgb only
    assert all(THERMAL in C.get_spec(n, kind="warp").modalities for n in C.names(kind="warp"))


def test_decorators_require_modalities():
    spec = C.get_spec("motion_blur")
    decl = dict(family="storm", params=spec.params_type, severities=dict(spec.severities),
                statistic=spec.statistic, targets=spec.targets, direction=spec.direction,
                fit_param=spec.fit_param, fit_bounds=spec.fit_bounds)
    with pytest.raises(TypeError, match="declare modalities"):
        corruption("shake_blur", **decl)
    with pytest.raises(TypeError, match="declare modalities"):
        perturbation("fog_patch", kind="warp", family="warp", params=spec.params_type)
    with pytest.raises(ValueError, match="modalities must be"):
        @corruption("shake_blur", **decl, modalities=("rgb", "radar"), modality_note="radar is not a sensor here")
        def shake_blur(image, rng, p, px):
            return image
    with pytest.raises(ValueError, match="modality_note"):
        @corruption("shake_blur", **decl, modalities=("rgb",))
        def shake_blur(image, rng, p, px):  # noqa: F811
            return image
    assert "shake_blur" not in C.names()


# --------------------------------------------------------------------- build


def test_thermal_source_gets_no_split_where_not_physical(mixed):
    m = load_manifest(mixed)
    assert verify_repo(mixed).ok
    assert m["sources"]["thermal_sar"]["modality"] == THERMAL and m["sources"]["rgb_sar"]["modality"] == "rgb"
    cfgs = m["configs"]
    assert set(cfgs["clean"]["splits"]) == {"rgb_sar", "rgb_sar_val", "thermal_sar", "thermal_sar_val"}
    assert set(cfgs["motion_blur_s1"]["splits"]) == {"rgb_sar", "thermal_sar"}
    assert "not_physical" not in cfgs["motion_blur_s1"] and "not_physical" not in cfgs["clean"]
    for config in ("low_light_s1", "motion_blur_s1__low_light_s1"):
        assert set(cfgs[config]["splits"]) == {"rgb_sar"}, config
        assert cfgs[config]["not_physical"] == {"thermal_sar": THERMAL}, config
    assert set(datasets.load_dataset(str(mixed), "low_light_s1")) == {"rgb_sar"}
    assert set(datasets.load_dataset(str(mixed), "motion_blur_s1")) == {"rgb_sar", "thermal_sar"}


def test_card_shows_modality_and_not_physical_cells(mixed):
    card = (mixed / "README.md").read_text()
    section = card[card.index("## Sources and conditions"):].split("\n## ")[0]
    rows = {line.split(" | ")[0].strip("| `"): line for line in section.splitlines() if line.startswith("| `")}
    assert rows["low_light_s1"].endswith("| 2 | n/a (not physical for thermal) |")
    assert rows["motion_blur_s1__low_light_s1"].endswith("| 2 | n/a (not physical for thermal) |")
    assert rows["motion_blur_s1"].endswith("| 2 | 2 |") and rows["clean"].endswith("| 2 | 2 |")
    assert "`thermal_sar` (thermal)" in section and "| `thermal_sar` | sar | synthetic_sar | thermal |" in card
    low = next(line for line in card.splitlines() if line.startswith("- `low_light`"))
    assert "Sensors: rgb (" in low and C.get_spec("low_light").modality_note.rstrip(".") in low


def test_config_every_source_skips_is_recorded_not_declared(tmp_path):
    repo = _build(tmp_path, {"thermal_sar": THERMAL}, conditions=["low_light_s1"], compound=[])
    m = load_manifest(repo)
    assert verify_repo(repo).ok
    assert m["configs"]["low_light_s1"]["splits"] == {}
    assert m["configs"]["low_light_s1"]["not_physical"] == {"thermal_sar": THERMAL}
    front = yaml.safe_load((repo / "README.md").read_text().split("---")[1])
    assert [c["config_name"] for c in front["configs"]] == ["clean"]  # no config without data files
    assert set(datasets.load_dataset(str(repo), "clean")) == {"thermal_sar", "thermal_sar_val"}


# ---------------------------------------------------------------- evaluation


def _metrics(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / "metrics.parquet")


def _names(df: pl.DataFrame, source: str, config: str) -> list[str]:
    return df.filter((pl.col("source") == source) & (pl.col("config") == config))["metric"].to_list()


def test_evaluate_emits_noted_null_rows_for_not_physical_configs(mixed, tmp_path):
    index = DatasetIndex(mixed)
    folder = write_submission(tmp_path / "gt", index, "sar", gt_table(index, "sar"))
    out = evaluate_submission(folder, mixed, tmp_path / "results", FAST, verify=False)
    df = _metrics(out)
    for config in ("low_light_s1", "motion_blur_s1__low_light_s1"):
        rows = df.filter((pl.col("source") == "thermal_sar") & (pl.col("config") == config))
        # one row per metric a condition row of the same kind has (the rgb source's, scored for real)
        assert rows["metric"].to_list() == _names(df, "rgb_sar", config), config
        assert rows.height > 10 and rows["value"].null_count() == rows.height
        assert rows["lo"].null_count() == rows.height and set(rows["note"].to_list()) == {NOT_PHYSICAL}
        assert rows["corruption"][0] == index.meta(config)["corruption"]
    scored = df.filter((pl.col("source") == "thermal_sar") & (pl.col("config") == "motion_blur_s1"))
    assert scored["note"].null_count() == scored.height and scored["value"].null_count() < scored.height
    assert scored.filter(pl.col("metric") == "recall")["value"][0] == 1.0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["configs_not_physical"] == {"thermal_sar": ["low_light_s1", "motion_blur_s1__low_light_s1"]}
    assert "low_light_s1" not in prov["configs"]["thermal_sar"] and prov["sources_skipped"] == {}


def _drop_val(repo: Path, dest: Path, sources: list[str]) -> Path:
    """A copy of ``repo`` whose clean ``<source>_val`` splits are gone, as an older or
    external repo may be (files, manifest and digest consistent: it still verifies)."""
    shutil.copytree(repo, dest)
    m = json.loads((dest / MANIFEST).read_text())
    for source in sources:
        for shard in m["configs"]["clean"]["splits"].pop(f"{source}_val")["shards"]:
            (dest / shard["path"]).unlink()
            del m["files"][shard["path"]]
    m["dataset_digest"] = dataset_digest(m["benchmark_version"], m["configs"])
    card = dest / "README.md"  # the card states the split sizes and the digest: re-rendered
    card.write_text(render_card(m, *card_inputs(card.read_text())))
    m["files"]["README.md"] = {"sha256": file_sha256(card), "bytes": card.stat().st_size}
    (dest / MANIFEST).write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")
    assert verify_repo(dest).ok
    return dest


def test_source_without_val_is_skipped_with_noted_rows_others_scored(mixed, tmp_path):
    repo = _drop_val(mixed, tmp_path / "old", ["thermal_sar"])
    index = DatasetIndex(repo)
    folder = write_submission(tmp_path / "gt", index, "sar", gt_table(index, "sar"))
    out = evaluate_submission(folder, repo, tmp_path / "results", FAST)
    df = _metrics(out)
    skipped = df.filter(pl.col("source") == "thermal_sar")
    assert skipped["metric"].to_list() == ["frozen_threshold", "val_f1", "val_recall", "val_precision"]
    assert skipped["value"].null_count() == 4 and set(skipped["config"]) == {"clean"}
    assert set(skipped["note"].to_list()) == {"no clean val split to freeze a threshold on"}
    rgb = df.filter(pl.col("source") == "rgb_sar")
    assert set(rgb["config"]) == {"clean", *CONDITIONS, "motion_blur_s1__low_light_s1"}
    assert rgb.filter((pl.col("config") == "clean") & (pl.col("metric") == "recall"))["value"][0] == 1.0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["sources_skipped"] == {"thermal_sar": "no clean val split to freeze a threshold on"}
    assert set(prov["frozen_threshold"]) == {"rgb_sar"} and set(prov["configs"]) == {"rgb_sar"}


def test_track_without_any_val_split_is_refused_in_one_line(mixed, tmp_path, capsys):
    repo = _drop_val(mixed, tmp_path / "old", ["rgb_sar", "thermal_sar"])
    index = DatasetIndex(repo)
    folder = write_submission(tmp_path / "gt", index, "sar", gt_table(index, "sar"))
    rc = main(["evaluate", str(folder), "--dataset", str(repo), "--out", str(tmp_path / "results"),
               "--n-resamples", "20"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "rgb_sar_val" in err and "thermal_sar_val" in err and "freeze a threshold" in err
    assert not (tmp_path / "results" / "gt").exists()


# --------------------------------------------------------------- leaderboard


def test_preview_and_leaderboard_show_only_conditions_built_for_the_sensor(mixed, tmp_path, capsys):
    """Issue 33 item 3, end to end: preview --grid, evaluate, leaderboard --preview."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(_raw(mixed.parent, {"rgb_sar": "rgb", "thermal_sar": THERMAL})))
    preview = tmp_path / "preview"
    assert main(["preview", "--params", str(params), "--grid", "--cell", "32", "--out", str(preview)]) == 0
    capsys.readouterr()
    import cv2
    rows = {s: (cv2.imread(str(preview / f"{s}_grid.png")).shape[0] - 22) // 34 for s in ("rgb_sar", "thermal_sar")}
    assert rows == {"rgb_sar": len(C.names()), "thermal_sar": 3}  # no sun glint, low light or colour cast rows
    index = DatasetIndex(mixed)
    folder = write_submission(tmp_path / "gt", index, "sar", gt_table(index, "sar"))
    evaluate_submission(folder, mixed, tmp_path / "results", FAST, verify=False)
    lb = tmp_path / "lb"
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--dataset", str(mixed), "--out", str(lb),
                 "--preview", str(preview)]) == 0
    page = (lb / "site" / "index.html").read_text()
    heads = {s: re.findall(r'<th [^>]*data-config="([^"]+)"', page[page.index(f'id="heat-sar-{s}-recall"'):]
                           .split("</thead>")[0]) for s in ("rgb_sar", "thermal_sar")}
    assert heads == {"rgb_sar": ["clean", "motion_blur_s1", "low_light_s1", "motion_blur_s1__low_light_s1"],
                     "thermal_sar": ["clean", "motion_blur_s1"]}
    note = re.findall(r'id="not-built-sar-thermal_sar">([^<]+)<', page)
    assert note == ["Not built for thermal_sar (thermal sensor): 2 conditions whose physics does not hold for it, "
                    "so no column, panel or row here: low_light (s1); motion_blur_s1+low_light_s1."]
    assert NOT_PHYSICAL not in page and 'id="not-built-sar-rgb_sar"' not in page
    gallery = page[page.index('id="conditions"'):]
    assert set(re.findall(r'id="cond-thermal_sar-([a-z_]+)"', gallery)) == {"motion_blur"}
    assert set(re.findall(r'id="cond-rgb_sar-([a-z_]+)"', gallery)) == {"motion_blur", "low_light"}
    md = (lb / "README.md").read_text()
    assert NOT_PHYSICAL not in md and md.count("> Not built for thermal\\_sar (thermal sensor): 2 conditions") == 1
