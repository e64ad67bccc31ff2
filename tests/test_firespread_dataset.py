"""Fire-spread configs as a dataset repo, submissions, the evaluator, baselines and the CLI."""

from __future__ import annotations

import json
import pickle
import shutil

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from aegisbench import cli
from aegisbench.builders.firespread import build_firespread_repo, firespread_tasks, run_ensemble
from aegisbench.dataset.schema import FIRESPREAD_FEATURES
from aegisbench.dataset.manifest import load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.forecasters.convlstm import ConvLSTMConfig
from aegisbench.firespread.ensemble import burn_counts, z_moments
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.results import RESULTS_SCHEMA
from aegisbench.forecasters.baselines import write_baselines
from aegisbench.firespread.layout import make_initial_condition
from aegisbench.params.firespread import FirespreadParams
from aegisbench.forecasters.submission import FORECASTS, forecasts_table
from aegisbench.leaderboard.results import read_entry
from test_leaderboard_page import measure
from test_leaderboard_site import CHROMIUM

V = "0.1.0"
PARAMS = {"grid": [16, 16], "realizations": 24, "s_levels": [0, 30], "initial_conditions": 4,
          "test_initial_conditions": [2, 3], "realizations_per_shard": 10,
          "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("fs")
    build_firespread_repo(PARAMS, V, root / "repo")
    write_baselines(root / "repo", root / "subs", convlstm_cfg=ConvLSTMConfig(steps=2, hidden=4, batch=2,
                                                                              train_horizon=3,
                                                                              realizations_per_ensemble=4))
    return root


def test_firespread_commands_are_wired():
    assert "aegisbench.firespread.commands" in cli.COMMAND_MODULES


def test_tasks_are_picklable_independent_blocks(tmp_path):
    tasks = firespread_tasks(PARAMS, V)
    assert all(pickle.loads(pickle.dumps(t)) == t for t in tasks)
    assert {t.split for t in tasks} == {"firespread", "firespread_train"}
    assert all(t.relpath.startswith(f"{t.config}/{t.split}-") for t in tasks)
    blk = next(t for t in tasks if t.config == "firespread_s30" and t.start == 10)
    assert blk.features is FIRESPREAD_FEATURES["realizations"]
    entry = blk.run(tmp_path)
    rows = pq.read_table(tmp_path / entry.path).to_pylist()
    p = FirespreadParams.from_dict(PARAMS)
    full = run_ensemble(p, V, make_initial_condition(p, V, blk.ics[0]), 30)
    assert [r["realization"] for r in rows] == list(range(10, 20))
    assert np.array_equal(np.array([r["ignition_time"] for r in rows]), full.ignition_time[10:20])
    assert (tmp_path / ".shards").is_dir()  # resume sidecar, as build_repo expects


def test_repo_verifies_loads_and_statistic_matches_realizations(repo):
    path = repo / "repo"
    assert verify_repo(path).ok
    m = load_manifest(path)
    assert set(m["configs"]) == {"firespread_s0", "firespread_s30", "firespread_statistic"}
    ds = datasets.load_dataset(str(path), "firespread_s30")
    assert set(ds) == {"firespread", "firespread_train"} and ds["firespread"].num_rows == 2 * 24
    st = datasets.load_dataset(str(path), "firespread_statistic")["firespread"].with_format("numpy")
    real = ds["firespread"].with_format("numpy")
    for row in st:
        if row["s_level"] != 30:
            continue
        held = int(row["held_out_realizations"])
        assert held == row["eval_realizations"] >= 1
        # the statistic counts exactly the realizations that are not scored (held-out truth)
        sel = [i for i, ic in enumerate(real["initial_condition"])
               if ic == row["initial_condition"] and real[i]["realization"] >= held]
        tau = np.stack([np.stack(real[i]["ignition_time"]) for i in sel])
        counts = np.stack([np.stack(c) for c in row["burn_counts"]])
        assert np.array_equal(counts, burn_counts(tau, len(counts) - 1))
        zm, zv = z_moments(tau, int(row["n_trees"]), len(counts))
        assert np.allclose(zm, row["z_mean"]) and np.allclose(zv, row["z_var"])
        assert row["n_realizations"] == 24 - held == len(sel) and row["forecast_observe"] == 4
    # tampering is caught
    shard = path / m["configs"]["firespread_s0"]["splits"]["firespread"]["shards"][0]["path"]
    copy = repo / "tampered"
    shutil.copytree(path, copy)
    (copy / shard.relative_to(path)).write_bytes(shard.read_bytes() + b"x")
    assert not verify_repo(copy).ok


def test_same_build_same_digest(repo, tmp_path):
    again = build_firespread_repo(PARAMS, V, tmp_path / "again")
    assert again["dataset_digest"] == load_manifest(repo / "repo")["dataset_digest"]


def test_baselines_validate_and_evaluate(repo, capsys):
    path = repo / "repo"
    for name in ("oracle", "persistence", "spread_heuristic", "convlstm"):
        sub = repo / "subs" / f"firespread_{name}"
        assert cli.main(["validate", str(sub), "--dataset", str(path)]) == 0
        assert f"firespread_{name}: OK (track firespread" in capsys.readouterr().out
    out = repo / "res" / "firespread_oracle"
    assert cli.main(["evaluate", str(repo / "subs" / "firespread_oracle"), "--dataset", str(path),
                     "--results", str(repo / "res"), "--n-resamples", "50"]) == 0
    t = pq.read_table(out / "metrics.parquet")
    assert t.schema.equals(RESULTS_SCHEMA)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["track"] == "firespread" and prov["bootstrap"]["unit"] == "initial condition"
    assert read_entry(out).provenance["submission"] == "firespread_oracle"  # the leaderboard accepts it
    rows = t.to_pylist()
    metrics = {r["metric"] for r in rows}
    assert {"precision", "recall", "f1", "average_precision", "auc_pr_trapezoid", "brier", "brier_reliability",
            "brier_resolution", "brier_uncertainty", "ece", "oracle_brier", "excess_brier"} <= metrics
    assert {r["config"] for r in rows} == {"firespread_s0", "firespread_s30"}
    assert any(r["stratum"].startswith("var_z:") for r in rows) and any(r["stratum"].startswith("dice:") for r in rows)
    assert {r["t"] for r in rows} - {None} == set(range(5, 11))
    excess = [r["value"] for r in rows if r["metric"] == "excess_brier"]
    assert np.allclose(excess, 0.0)  # the oracle is the oracle
    s0 = {r["metric"]: r["value"] for r in rows if r["config"] == "firespread_s0" and r["t"] is None
          and r["stratum"] == "all"}
    assert s0["recall"] == 1.0 and s0["brier"] == 0.0 and s0["ece"] == 0.0
    assert (out / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    pers_dir = evaluate_submission(repo / "subs" / "firespread_persistence", path, repo / "res",
                                   EvaluationParams(bootstrap=BootstrapParams(n_resamples=20)))
    pers = pq.read_table(pers_dir / "metrics.parquet").to_pylist()
    b = [r["value"] for r in pers if r["metric"] == "brier" and r["config"] == "firespread_s0" and r["t"] == 10]
    assert b[0] > 0  # persistence misses the spread


def test_held_out_truth_ece_floor_pooled_strata_and_report(repo, tmp_path, capsys):
    path = repo / "repo"
    res = tmp_path / "results"
    for name in ("oracle", "persistence"):
        assert cli.main(["evaluate", str(repo / "subs" / f"firespread_{name}"), "--dataset", str(path),
                         "--results", str(res), "--n-resamples", "30"]) == 0
    # the scored realizations are not in the statistic: the oracle no longer scores Brier 0
    # against them at S30, but its ECE floor is reported beside its ECE
    rows = pq.read_table(res / "firespread_oracle" / "metrics.parquet").to_pylist()
    cell = {(r["config"], r["t"], r["stratum"], r["metric"]): r for r in rows}
    floor = cell[("firespread_s30", None, "all", "ece_floor")]
    assert floor["lo"] <= floor["value"] <= floor["hi"] and floor["value"] > 0
    assert cell[("firespread_s30", None, "all", "brier")]["value"] > 0
    assert cell[("firespread_s0", None, "all", "ece_floor")]["value"] == 0.0
    # strata pooled over S-levels: the pooled "all" cell counts the pixels of both configs
    strata = pq.read_table(res / "firespread_oracle" / "strata.parquet")
    assert strata.schema.equals(RESULTS_SCHEMA)
    pooled = {(r["stratum"], r["metric"]): r for r in strata.to_pylist()}
    assert {r["config"] for r in strata.to_pylist()} == {"firespread_pooled"}
    n_all = sum(cell[(c, None, "all", "brier")]["n"] for c in ("firespread_s0", "firespread_s30"))
    assert pooled[("all", "brier")]["n"] == n_all
    b = [cell[(c, None, "all", "brier")] for c in ("firespread_s0", "firespread_s30")]
    assert pooled[("all", "brier")]["value"] == pytest.approx(sum(r["value"] * r["n"] for r in b) / n_all)
    assert any(k[0].startswith("var_z:") for k in pooled)
    # the report: Fig. 3 data equal the statistic's z_var, the table holds both results
    out = tmp_path / "report"
    assert cli.main(["firespread-report", "--dataset", str(path), "--results", str(res), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "f2r_vs_f2s.csv", "sd_zt.csv", "sd_zt.png"]
    assert (out / "sd_zt.png").read_bytes()[:4] == b"\x89PNG"
    import polars as pl
    sd = pl.read_csv(out / "sd_zt.csv")
    st = datasets.load_dataset(str(path), "firespread_statistic")["firespread"]
    for row in st:
        got = sd.filter((pl.col("s_level") == row["s_level"]) & (pl.col("initial_condition") == row["initial_condition"]))
        assert np.allclose(got.sort("t")["sd_z"].to_numpy(), np.sqrt(row["z_var"]), atol=1e-5)
    assert (sd.filter(pl.col("s_level") == 0)["sd_z"] == 0).all()
    table = pl.read_csv(out / "f2r_vs_f2s.csv")
    assert set(table["submission"]) == {"firespread_oracle", "firespread_persistence"}
    assert {"f1", "brier", "ece", "ece_floor", "f1_sd_maps"} <= set(table["metric"])
    md = (out / "README.md").read_text()
    assert "F2R vs F2S" in md and "| all |" in md
    # a results folder without strata.parquet is refused, nothing replaced
    (res / "firespread_persistence" / "strata.parquet").unlink()
    assert cli.main(["firespread-report", "--dataset", str(path), "--results", str(res), "--out", str(out),
                     ]) == 0  # default: only folders that hold strata.parquet
    assert set(pl.read_csv(out / "f2r_vs_f2s.csv")["submission"]) == {"firespread_oracle"}
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    from aegisbench.errors import BadInput
    from aegisbench.leaderboard.firespread_report import write_report
    with pytest.raises(BadInput, match="strata.parquet"):
        write_report(path, res, out, submissions=["firespread_persistence"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the last good report is kept


@pytest.fixture(scope="module")
def board(repo, tmp_path_factory):
    """Two fire-spread baselines evaluated and a leaderboard of them: (results, leaderboard)."""
    tmp = tmp_path_factory.mktemp("fs-board")
    res = tmp / "results"
    for name in ("oracle", "persistence"):
        assert cli.main(["evaluate", str(repo / "subs" / f"firespread_{name}"), "--dataset", str(repo / "repo"),
                         "--results", str(res), "--n-resamples", "30"]) == 0
    lb = tmp / "lb"
    assert cli.main(["leaderboard", "--results", str(res), "--dataset", str(repo / "repo"), "--out", str(lb)]) == 0
    return res, lb


def test_leaderboard_shows_fig3_and_the_f2r_f2s_table(repo, board, tmp_path, capsys):
    path = repo / "repo"
    res, lb = board
    assert (res / "firespread_oracle" / "strata.parquet").is_file()
    assert sorted(p.name for p in (lb / "firespread").iterdir()) == ["README.md", "f2r_vs_f2s.csv", "sd_zt.csv",
                                                                     "sd_zt.png"]
    html = (lb / "site" / "index.html").read_text()
    assert 'id="firespread-report"' in html and "plots/firespread-sd_zt.png" in html
    assert html.count("F2R vs F2S by Var[Z_t]") == 2 and "ECE floor" in html
    assert (lb / "site" / "plots" / "firespread-sd_zt.png").read_bytes() == (lb / "firespread" / "sd_zt.png").read_bytes()
    assert "(firespread/README.md)" in (lb / "README.md").read_text()
    again = tmp_path / "lb2"
    assert cli.main(["leaderboard", "--results", str(res), "--dataset", str(path), "--out", str(again)]) == 0
    for f in ("firespread/sd_zt.png", "firespread/f2r_vs_f2s.csv", "site/index.html"):
        assert (lb / f).read_bytes() == (again / f).read_bytes()  # same results, same bytes


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed at /usr/bin/chromium")
def test_fire_spread_section_fits_1400_and_400_px(board, tmp_path):
    """Issue 33 item 3: Fig. 3 and the fire-spread curves whole on screen at both widths, at
    no less than 3/4 of their size (a phone gets Fig. 3's panels stacked), no page overflow."""
    _, lb = board
    shown = {}
    for width in (1400, 400):
        m = measure(lb / "site", "index.html", width, tmp_path)
        assert m["scroll"] <= m["inner"] == width, m["scroll"]
        bad = [f for f in m["figures"] if f["clipped"] or f["scale"] < 0.75]
        assert not bad, (width, bad)
        shown[width] = {f["src"] for f in m["figures"]}
    assert "firespread-sd_zt.png" in shown[1400] and "firespread-sd_zt-narrow.png" in shown[400]
    assert "curves-firespread-firespread-f1.svg" in shown[400] & shown[1400]


def _broken(repo, tmp_path, mutate) -> str:
    src = repo / "subs" / "firespread_persistence"
    dst = tmp_path / "sub"
    shutil.copytree(src, dst)
    t = pq.read_table(dst / FORECASTS)
    keys = list(zip(*(t.column(c).to_pylist() for c in ("config", "initial_condition", "realization", "t"))))
    maps = np.array([np.array(m, np.float32) for m in t.column("probability").to_pylist()])
    keys, maps = mutate(keys, maps)
    pq.write_table(forecasts_table(keys, maps) if not isinstance(maps, type(t)) else maps, dst / FORECASTS)
    return str(dst)


@pytest.mark.parametrize("mutate, needle", [
    (lambda k, m: (k, np.where(np.arange(m.size).reshape(m.shape) == 5, np.nan, m)), "row 0 field probability: NaN"),
    (lambda k, m: (k, m + 1.5), "row 0 field probability: value outside [0, 1]"),
    (lambda k, m: (k, m[:, :, :-1]), "row 0 field probability: map rows must have 16 values"),
    (lambda k, m: (k[:-1], m[:-1]), "coverage: 1 of"),
    (lambda k, m: (k + k[:1], np.concatenate([m, m[:1]])), "more than the 72 forecast targets of the dataset"),
    (lambda k, m: (k[:-1] + k[:1], np.concatenate([m[:-1], m[:1]])), "field t: duplicate forecast"),
    (lambda k, m: ([("firespread_s5", *k[0][1:])] + k[1:], m), "row 0 field config: no such forecast target"),
    (lambda k, m: ([(k[0][0], 0, *k[0][2:])] + k[1:], m), "row 0 field initial_condition"),
])
def test_invalid_submissions_exit_2_naming_row_and_field(repo, tmp_path, capsys, mutate, needle):
    sub = _broken(repo, tmp_path, mutate)
    assert cli.main(["validate", sub, "--dataset", str(repo / "repo")]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.endswith("invalid submission: 1 problem(s)\n") and err.count("\n") == 2


def test_digest_mismatch_and_missing_folder_exit_2(repo, tmp_path, capsys):
    sub = _broken(repo, tmp_path, lambda k, m: (k, m))
    meta = yaml.safe_load((tmp_path / "sub" / "submission.yaml").read_text())
    meta["dataset_digest"] = "0" * 64
    (tmp_path / "sub" / "submission.yaml").write_text(yaml.safe_dump(meta))
    assert cli.main(["validate", sub, "--dataset", str(repo / "repo")]) == 2
    assert "field dataset_digest" in capsys.readouterr().err
    assert cli.main(["validate", str(tmp_path / "nope"), "--dataset", str(repo / "repo")]) == 2
    assert cli.main(["firespread-baselines", "--dataset", str(repo / "repo"), "--only", "magic"]) == 2


def test_convlstm_on_openblas_from_the_command_line(repo, tmp_path, capsys):
    """``--convlstm-gemm openblas``: the ConvLSTM trains and rolls out with its convolutions on
    NumPy's OpenBLAS; the submission validates, says so in its kernels (and so does its evaluated
    row: they were dropped from submission.yaml before 0.10.0), and its maps are not the MKL
    path's (same steps, same seed). A BLAS it does not know: one line, exit 2, nothing written."""
    path = str(repo / "repo")
    base = ["firespread-baselines", "--dataset", path, "--only", "convlstm", "--convlstm-steps", "2",
            "--convlstm-hidden", "4"]
    for gemm in ("mkl", "openblas"):
        assert cli.main([*base, "--submissions", str(tmp_path / gemm), "--convlstm-gemm", gemm]) == 0
        assert cli.main(["validate", str(tmp_path / gemm / "firespread_convlstm"), "--dataset", path]) == 0
    capsys.readouterr()
    meta = {g: yaml.safe_load((tmp_path / g / "firespread_convlstm" / "submission.yaml").read_text())
            for g in ("mkl", "openblas")}
    assert ", conv OpenBLAS " in meta["openblas"]["kernels"] and "OpenBLAS" not in meta["mkl"]["kernels"]
    maps = {g: b"".join(f.read_bytes() for f in sorted((tmp_path / g / "firespread_convlstm").glob("*.parquet")))
            for g in ("mkl", "openblas")}
    assert maps["mkl"] and maps["mkl"] != maps["openblas"]
    # the evaluated row carries the machine class (the leaderboard's per-row kernels)
    assert cli.main(["evaluate", str(tmp_path / "openblas" / "firespread_convlstm"), "--dataset", path,
                     "--results", str(tmp_path / "res"), "--n-resamples", "20"]) == 0
    prov = json.loads((tmp_path / "res" / "firespread_convlstm" / "provenance.json").read_text())
    assert prov["kernels"] == meta["openblas"]["kernels"]
    with pytest.raises(SystemExit) as exc:
        cli.main([*base, "--submissions", str(tmp_path / "bad"), "--convlstm-gemm", "atlas"])
    assert exc.value.code == 2 and "--convlstm-gemm: invalid choice: 'atlas'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def _mixed_params(tmp_path, firespread) -> str:
    raw = {"benchmark_version": V,
           "paths": {"sources": str(tmp_path / "sources"), "dataset": str(tmp_path / "mixed")},
           "build": {"conditions": ["low_light_s2"]},
           "sources": {"synthetic_sar": {"track": "sar", "kind": "synthetic_sar", "license": "mit",
                                         "options": {"n_train": 1, "n_val": 1, "n_test": 2, "images_per_flight": 1,
                                                     "small_size": [160, 160], "large_size": [320, 240]}}},
           "firespread": firespread}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def test_default_build_holds_image_and_firespread_configs(tmp_path, capsys):
    """`aegisbench sources` + `aegisbench build` put the ensembles into the same repo as the
    image configs: one manifest and digest, per-config features in the card, load_dataset."""
    params = _mixed_params(tmp_path, PARAMS)
    assert cli.main(["sources", "--params", params]) == 0
    assert cli.main(["build", "--params", params, "--skip-sources"]) == 0
    repo = tmp_path / "mixed"
    assert verify_repo(repo).ok
    manifest = load_manifest(repo)
    assert sorted(manifest["configs"]) == ["clean", "firespread_s0", "firespread_s30", "firespread_statistic",
                                           "low_light_s2"]
    assert manifest["sources"]["firespread"]["track"] == "firespread"
    assert manifest["configs"]["firespread_s30"]["meta"]["s_level"] == 30
    assert manifest["configs"]["firespread_s30"]["splits"]["firespread"]["rows"] == 2 * 24
    card = yaml.safe_load((repo / "README.md").read_text().split("---")[1])
    feats = {i["config_name"]: {f["name"] for f in i["features"]} for i in card["dataset_info"]}
    assert "ignition_time" in feats["firespread_s0"] and "image" not in feats["firespread_s0"]
    assert "burn_counts" in feats["firespread_statistic"] and "image" in feats["clean"]
    ds = datasets.load_dataset(str(repo), "firespread_s30", split="firespread")
    assert len(ds) == 48 and np.asarray(ds[0]["ignition_time"]).shape == (16, 16)
    assert len(datasets.load_dataset(str(repo), "clean", split="synthetic_sar")) == 2
    # the ensembles equal those of the fire-spread-only builder (same keys, same bytes)
    alone = build_firespread_repo(PARAMS, V, tmp_path / "alone")
    for name in ("firespread_s0", "firespread_s30", "firespread_statistic"):
        assert manifest["configs"][name]["splits"] == alone["configs"][name]["splits"]


def test_bad_firespread_section_exits_2_and_writes_nothing(tmp_path, capsys):
    params = _mixed_params(tmp_path, {**PARAMS, "grid_size": 12})
    assert cli.main(["sources", "--params", params]) == 2
    assert cli.main(["build", "--params", params]) == 2
    assert "params.yaml: firespread" in capsys.readouterr().err
    assert not (tmp_path / "mixed").exists()


def test_one_validate_for_every_track_refuses_a_threshold_and_a_foreign_track(repo, tmp_path, capsys):
    """The shared submission.yaml checks apply to fire-spread as to detection: a
    ``threshold`` field is refused (exit 2, nothing written), as is a fire-spread folder
    declaring a detection track."""
    sub = _broken(repo, tmp_path, lambda k, m: (k, m))
    meta_path = tmp_path / "sub" / "submission.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    meta_path.write_text(yaml.safe_dump({**meta, "threshold": 0.5}))
    results = tmp_path / "results"
    for cmd in (["validate", sub], ["evaluate", sub, "--results", str(results)]):
        assert cli.main([*cmd, "--dataset", str(repo / "repo")]) == 2
        assert "field threshold: thresholds cannot be set by a submission" in capsys.readouterr().err
    assert not results.exists()
    meta_path.write_text(yaml.safe_dump({**meta, "track": "sar"}))
    assert cli.main(["validate", sub, "--dataset", str(repo / "repo")]) == 2
    assert "the dataset has no split of track 'sar'" in capsys.readouterr().err  # read as detection
