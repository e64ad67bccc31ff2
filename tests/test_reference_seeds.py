"""The reference rows' training seeds (issue 36 item 3): ``reference.seeds`` checked before
anything runs, the extra seeds scored with the pipeline's own command lines, and the seed
table read and shown by the leaderboard. The whole chain on a real DVC project (seeds: 2) is
in tests/test_dvc.py."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml

from aegisbench.errors import BadInput
from aegisbench.leaderboard.seeds import COLUMNS, SEEDS_FILE, read_seeds, seed_note, spread_rows
from aegisbench.pipeline.seeds import SeedParams, interpolate, replace_option, stage_argv
from test_schedule import _run_copy

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("raw, needle", [({"seeds": 0}, "seeds"), ({"seeds": 11}, "seeds"),
                                         ({"seeds": "3"}, "seeds"), ({"seeds": 2.5}, "seeds"),
                                         ({"seeds": 2, "seed": 1}, "unknown keys ['seed']"), ([3], "mapping")])
def test_bad_reference_seeds_are_refused(raw, needle):
    with pytest.raises(BadInput, match="params.yaml: reference") as info:
        SeedParams.from_dict(raw)
    assert needle in str(info.value)


def test_run_refuses_bad_reference_seeds_before_writing(tmp_path, monkeypatch, capsys):
    def edit(p):
        p["reference"] = {"seeds": 0}

    err = _run_copy(tmp_path, monkeypatch, capsys, [], edit)
    assert len(err) == 1 and "reference" in err[0] and "seeds" in err[0]


def test_the_extra_seeds_use_the_rows_own_command_lines():
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    detect = stage_argv(spec, "detect_reference_smoke", "detect", params)  # the first of the stage's two lines
    assert detect[0] == "detect" and detect[detect.index("--weights") + 1] == "data/models/reference_smoke/weights.pt"
    assert "--imgsz" in detect and "--verified" in detect
    mine = replace_option(replace_option(detect, "--weights", "w.pt"), "--verified", None)
    assert mine[mine.index("--weights") + 1] == "w.pt" and "--verified" not in mine
    assert len(mine) == len(detect) - 1  # nothing else changed
    evaluate = stage_argv(spec, "evaluate", "evaluate", params, "reference_sar")
    assert evaluate[:2] == ["evaluate", "submissions/reference_sar"]
    assert evaluate[evaluate.index("--n-resamples") + 1] == str(params["evaluation"]["n_resamples"])
    with pytest.raises(BadInput, match="no stage 'detect_reference_sat'"):
        stage_argv(spec, "detect_reference_sat", "detect", params)
    with pytest.raises(BadInput, match="has no `aegisbench detect` line"):
        stage_argv(spec, "leaderboard", "detect", params)
    with pytest.raises(BadInput, match="has no --weights"):
        replace_option(["detect", "--out", "x"], "--weights", "w.pt")
    with pytest.raises(BadInput, match=r"\$\{evaluation.n\} is not in params.yaml"):
        interpolate("--n ${evaluation.n}", params)


def _table(sub: str, seeds: dict[int, list[float]], primary: int = 0) -> pl.DataFrame:
    """Recall on clean and fog_s1 for each seed (values in that order), intervals +-0.05."""
    rows = []
    for seed, values in seeds.items():
        for (config, sev), v in zip((("clean", 0), ("fog_s1", 1)), values):
            rows.append({"submission": sub, "seed": seed, "primary": seed == primary, "source": "src",
                         "config": config, "severity": sev, "metric": "recall", "value": v,
                         "lo": v - 0.05, "hi": v + 0.05})
    return pl.DataFrame(rows, schema=COLUMNS)


def test_seed_spread_against_hand_computed_ranges():
    long = _table("ref", {0: [0.80, 0.40], 1: [0.70, 0.42], 2: [0.88, 0.38]})
    rows = {r["config"]: r for r in spread_rows(long, "ref", "src", "recall")}
    assert rows["clean"]["values"] == [0.80, 0.70, 0.88] and rows["clean"]["range"] == pytest.approx(0.18)
    assert rows["clean"]["width"] == pytest.approx(0.10) and rows["clean"]["wider"] is True
    assert rows["fog_s1"]["range"] == pytest.approx(0.04) and rows["fog_s1"]["wider"] is False
    assert rows["clean"]["value"] == 0.80 and rows["clean"]["lo"] == pytest.approx(0.75)  # the row's seed
    one = spread_rows(_table("ref", {0: [0.8, 0.4]}), "ref", "src", "recall")
    assert one[0]["range"] is None and one[0]["wider"] is None  # one seed: no spread, never 0
    assert "1 training seed" in seed_note("ref", [0], 0) and "3 training seeds (0, 1, 2" in seed_note("ref", [0, 1, 2], 0)


def test_read_seeds_checks_each_table_and_names_it(tmp_path):
    (tmp_path / "ref").mkdir()
    good = _table("ref", {0: [0.8, 0.4], 1: [0.7, 0.5]})
    good.write_parquet(tmp_path / "ref" / SEEDS_FILE)
    got = read_seeds(tmp_path, ["ref", "other"])  # "other" has none: absent, not an error
    assert got.height == 4 and sorted(got["seed"].unique().to_list()) == [0, 1]
    assert read_seeds(None, ["ref"]) is None
    bad = {"no primary": good.with_columns(pl.lit(False).alias("primary")),
           "another submission": good.with_columns(pl.lit("x").alias("submission")),
           "lacks columns": good.drop("lo"),
           "repeats": pl.concat([good, good.head(1)]),
           "wrong type": good.with_columns(pl.lit("high").alias("value"))}
    for why, df in bad.items():
        df.write_parquet(tmp_path / "ref" / SEEDS_FILE)
        with pytest.raises(BadInput) as info:
            read_seeds(tmp_path, ["ref"])
        assert str(tmp_path / "ref" / SEEDS_FILE) in str(info.value), why
    (tmp_path / "ref" / SEEDS_FILE).write_bytes(b"not parquet")
    with pytest.raises(BadInput, match="unreadable seed table"):
        read_seeds(tmp_path, ["ref"])
