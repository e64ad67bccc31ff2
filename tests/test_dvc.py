"""`dvc repro` in a temporary git repository, end to end on a tiny version of the default:
sources -> build (image configs + fire-spread ensembles) -> reference detector training ->
detect -> reference forecasters -> evaluate (one stage per submission) -> leaderboard; then a
second run does nothing, re-sharding reruns only the build, a parameter change reruns exactly
its dependents, and an invalid
submission stops the pipeline with the validator's message, leaving the leaderboard as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from aegisbench.dataset.manifest import load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.cli import main
from aegisbench.errors import BadInput
from aegisbench.pipeline import fast_params, prepare_project

ROOT = Path(__file__).resolve().parents[1]
EXP_SHOW_DROP = "^(src|aegisbench|data|submissions|results)(/|$)"  # the README's `dvc exp show --drop`

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _run(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture
def project(tmp_path):
    """The checkout's dvc.yaml and code on the fast variant of its params.yaml (the same
    scratch project `aegisbench run --fast` uses), committed to a fresh git repository."""
    params = fast_params(yaml.safe_load((ROOT / "params.yaml").read_text()))
    repo = prepare_project(ROOT, tmp_path / "project", params)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    assert _run(["git", "status", "--porcelain"], repo, env) == ""  # prepared and committed
    return repo, env, [sys.executable, "-m", "dvc"]


def _stdout(args, cwd, env) -> str:
    """The last line a command prints on stdout (``datasets`` writes its progress to stderr)."""
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()[-1]


def _ran(out: str) -> list[str]:
    return sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage"))


def _leaves(doc) -> list:
    return [x for v in doc.values() for x in _leaves(v)] if isinstance(doc, dict) else [doc]


def _fail(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode != 0, f"{args} should have failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_dvc_repro_runs_the_whole_pipeline_then_is_a_no_op(project):
    repo, env, dvc = project
    out = _run([*dvc, "repro"], repo, env)
    for stage in ("sources", "build", "digest", "calibrate", "ladders", "preview", "train_reference@sar", "train_reference@smoke",
                  "detect_reference_sar", "detect_reference_smoke", "firespread_baselines",
                  "evaluate@reference_sar", "evaluate@firespread_convlstm", "leaderboard"):
        assert f"Running stage '{stage}'" in out, stage
    assert verify_repo(repo / "aegisbench").ok
    manifest = load_manifest(repo / "aegisbench")
    assert set(manifest["configs"]["clean"]["splits"]) == {
        "synthetic_sar", "synthetic_sar_val", "synthetic_smoke", "synthetic_smoke_val"}
    assert sorted(manifest["configs"]) == ["clean", "firespread_s0", "firespread_s30", "firespread_statistic",
                                           "low_light_s2__inundation_s2", "low_light_s3", "rain_streaks_s1"]
    assert manifest["configs"]["firespread_s30"]["splits"]["firespread"]["rows"] == 20  # 1 test IC x 20
    for key in ("sar", "smoke"):  # the weights and a path-free recipe, nothing else (scores: detect + evaluate)
        model = repo / f"data/models/reference_{key}"
        assert sorted(p.name for p in model.rglob("*")) == ["train.json", "weights.pt"]
        recipe = (model / "train.json").read_text()
        assert str(repo) not in recipe and "/tmp" not in recipe and '"weights_sha256"' in recipe
    assert (repo / "submissions/reference_smoke/warp_patch.parquet").is_file()
    _recipe_scores_are_the_rows(repo)
    # WARP noise: not built, swept by warp-detect at warp.noise_levels; each L(a) with its interval
    sweep = json.loads((repo / "results/reference_smoke/warp_noise.json").read_text())["synthetic_smoke"]
    assert [lv["a"] for lv in sweep["levels"]] == [0.1, 0.2, 0.4]  # (a one-epoch model: L may be 0/0, null)
    assert all(lv["lo"] is None or lv["lo"] <= lv["hi"] for lv in sweep["levels"])
    # the leaderboard: every submission merged, reference rows first, nothing skipped
    board = (repo / "leaderboard/README.md").read_text()
    assert "reference_sar" in board and "firespread_oracle" in board
    assert (repo / "leaderboard/site/index.html").is_file()
    assert json.loads((repo / "leaderboard/skipped.json").read_text()) == []
    metrics = _run([*dvc, "metrics", "show", "--json"], repo, env)
    assert "metrics/calibration.json" in metrics and "metrics/leaderboard.json" in metrics
    assert "reference_sar" in metrics and "floor_at" in metrics and "worst_miss" in metrics
    plots = _run([*dvc, "plots", "show", "--json"], repo, env)
    assert "plots/severity/sar__synthetic_sar__low_light.svg" in plots and "\"image\"" in plots
    assert (repo / "dvc.lock").exists() and (repo / "data/preview/synthetic_sar.png").exists()
    again = _run([*dvc, "repro"], repo, env)
    assert "Running stage" not in again
    assert "up to date" in again.lower()

    # the stages after build depend on the dataset's identity, not its folder's bytes: a card-only
    # change reruns the digest stage, whose output stays the same, and nothing downstream
    digest = (repo / "data/aegisbench.digest.json").read_bytes()
    assert json.loads(digest) == {"benchmark_version": manifest["benchmark_version"],
                                  "dataset_digest": manifest["dataset_digest"]}
    card = repo / "aegisbench/README.md"
    original = card.read_bytes()
    card.write_bytes(original + b"\nA local note.\n")
    assert _ran(_run([*dvc, "repro", "-s", "digest"], repo, env)) == ["digest"]
    assert (repo / "data/aegisbench.digest.json").read_bytes() == digest
    status = _run([*dvc, "status"], repo, env)
    changed = sorted(line.strip().rstrip(":") for line in status.splitlines() if line and not line[0].isspace())
    assert changed == ["build"], status  # its output was edited; nothing after it is affected
    card.write_bytes(original)
    _run([*dvc, "repro", "-s", "digest"], repo, env)
    assert "up to date" in _run([*dvc, "status"], repo, env).lower()

    # re-sharding: other shard files, the same rows, so the same digest; nothing after it reruns
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["build"]["rows_per_shard"] = 1
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert _ran(_run([*dvc, "repro"], repo, env)) == ["build", "digest"]
    resharded = load_manifest(repo / "aegisbench")
    assert sorted(resharded["files"]) != sorted(manifest["files"]) and verify_repo(repo / "aegisbench").ok
    assert resharded["dataset_digest"] == manifest["dataset_digest"]
    assert (repo / "data/aegisbench.digest.json").read_bytes() == digest

    # a parameter change reruns exactly the stages that depend on it
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["evaluation"]["n_resamples"] = 60
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    third = _run([*dvc, "repro"], repo, env)
    ran = _ran(third)
    assert ran == sorted([f"evaluate@{s}" for s in params["submissions"]] + ["leaderboard", "reference_seeds@sar",
                                                                            "reference_seeds@smoke"]), ran
    params["warp"]["noise_levels"] = [0.1, 0.3]  # no rebuild: the sweep runs at detection time
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    ran = _ran(_run([*dvc, "repro"], repo, env))
    assert ran == ["detect_reference_smoke", "evaluate@reference_smoke", "leaderboard", "reference_seeds@smoke"], ran
    _two_training_seeds(repo, env, dvc, params)

    # the compact metrics: a few values per model and per calibration ladder
    shown = json.loads(_run([*dvc, "metrics", "show", "--json"], repo, env))
    (files,) = [v["data"] for v in shown.values()]
    count = sum(len(_leaves(f["data"])) for f in files.values())
    # each clean and floor value with its 95% interval (clean_lo/hi, floor_lo/hi): 65 on the fast project
    assert count <= 80 and set(files) == {"metrics/leaderboard.json", "metrics/calibration.json"}, (count, files)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "built"], repo, env)

    # pull instead of rebuild: push to a folder remote, clone, pull, verify, nothing to rerun
    _run([*dvc, "remote", "add", "-d", "shared", str(repo.parent / "remote")], repo, env)
    _run(["git", "commit", "-qam", "remote"], repo, env)
    _run([*dvc, "push"], repo, env)
    clone = repo.parent / "clone"
    _run(["git", "clone", "-q", str(repo), str(clone)], repo.parent, env)
    assert not (clone / "aegisbench").exists()
    pulled = _run([str(Path(sys.executable).parent / "aegisbench"), "pull"], clone, env)  # dvc pull + verify
    built = load_manifest(repo / "aegisbench")
    assert f"aegisbench: OK ({len(built['files'])} files, digest {built['dataset_digest']}: " in pulled
    assert load_manifest(clone / "aegisbench") == load_manifest(repo / "aegisbench")
    status = _run([*dvc, "status"], clone, env)
    assert "up to date" in status.lower(), status
    # the design card's call, literally, from the fresh clone's root (./aegisbench is the dataset repo;
    # `import aegisbench` is still the package, from src/); aegisbench.load from a folder deeper inside
    call = ("import datasets, aegisbench, pathlib; ds = datasets.load_dataset('aegisbench', 'low_light_s3'); "
            "print(sorted(ds), len(ds['synthetic_sar']), pathlib.Path(aegisbench.__file__).resolve())")
    out = _stdout([sys.executable, "-c", call], clone, env)
    rows = built["configs"]["low_light_s3"]["splits"]["synthetic_sar"]["rows"]
    assert out.startswith("['synthetic_sar', 'synthetic_smoke'] " + str(rows) + " "), out
    assert out.endswith("src/aegisbench/__init__.py") and str(clone) not in out, out
    deeper = "import aegisbench; print(len(aegisbench.load('low_light_s3')['synthetic_sar']))"
    assert _stdout([sys.executable, "-c", deeper], clone / "submissions", env) == str(rows)

    # an experiment from the committed project; `dvc exp show` narrowed as the README says (what
    # changed, no file-hash columns) fits 100 columns, where the whole table collapses to "…"
    _run([*dvc, "exp", "run", "-S", "evaluation.n_resamples=61"], repo, env)
    narrow_env = {**env, "COLUMNS": "100"}
    shown = _run([*dvc, "exp", "show", "--no-pager", "--only-changed", "--drop", EXP_SHOW_DROP], repo, narrow_env)
    assert f"--drop '{EXP_SHOW_DROP}'" in (ROOT / "README.md").read_text()
    assert "…" not in shown and "n_resamples" in shown and "61" in shown and "60" in shown, shown
    assert "…" in _run([*dvc, "exp", "show", "--no-pager"], repo, narrow_env)

    # `aegisbench run --fast` prepares this project again: the experiment's parameters are kept,
    # nothing is committed over it, and `dvc exp show` still lists it
    head = _run(["git", "rev-parse", "HEAD"], repo, env)
    mine = (repo / "params.yaml").read_bytes()
    prepare_project(ROOT, repo, fast_params(yaml.safe_load((ROOT / "params.yaml").read_text())))
    assert (repo / "params.yaml").read_bytes() == mine and _run(["git", "rev-parse", "HEAD"], repo, env) == head
    assert "61" in _run([*dvc, "exp", "show", "--no-pager", "--only-changed", "--drop", EXP_SHOW_DROP], repo,
                        narrow_env)
    changed = fast_params({**yaml.safe_load((ROOT / "params.yaml").read_text()), "benchmark_version": "9.9.9"})
    with pytest.raises(BadInput, match="changed since aegisbench run --fast wrote it"):
        prepare_project(ROOT, repo, changed)  # the checkout's params changed too: refused, nothing reset
    assert (repo / "params.yaml").read_bytes() == mine

    # an invalid submission stops the pipeline with the validator's message; the published
    # leaderboard is left exactly as it was
    before = {p.relative_to(repo): p.read_bytes() for p in (repo / "leaderboard").rglob("*") if p.is_file()}
    bad = repo / "submissions/broken_team"
    shutil.copytree(repo / "submissions/reference_sar", bad)
    (bad / "predictions.parquet").write_bytes(b"not parquet")
    params["submissions"].append("broken_team")
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    failed = _fail([*dvc, "repro"], repo, env)
    assert "predictions.parquet" in failed and "evaluate@broken_team" in failed
    after = {p.relative_to(repo): p.read_bytes() for p in (repo / "leaderboard").rglob("*") if p.is_file()}
    assert after == before


def _recipe_scores_are_the_rows(repo: Path) -> None:
    """perf/reference_recipes.py scores a reference's weights on the clean config the way the
    leaderboard scores its row (the track's threshold rule, the row's tiling, the detect stage's
    loader): the same frozen threshold and clean test recall as the evaluate stage wrote. So does
    ``train-reference``'s own scorer (on the source table, with ``--score-tile`` the row's tile)."""
    import importlib.util

    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.reference import score_on_source
    from aegisbench.detectors.tiling import TilingParams
    from aegisbench.detectors.trained import trained_gemm
    from aegisbench.kernels import portable

    spec = importlib.util.spec_from_file_location("reference_recipes", ROOT / "perf" / "reference_recipes.py")
    recipes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipes)
    for key in ("sar", "smoke"):
        source = f"synthetic_{key}"
        got = recipes.score_row_way(repo / f"data/models/reference_{key}/weights.pt", repo / "aegisbench", source,
                                    recipes.row_tile(repo / "dvc.yaml", key))
        provenance = json.loads((repo / f"results/reference_{key}/provenance.json").read_text())
        row = pl.read_parquet(repo / f"results/reference_{key}/metrics.parquet").filter(
            (pl.col("source") == source) & (pl.col("config") == "clean") & (pl.col("metric") == "recall"))
        assert got["threshold"] == provenance["frozen_threshold"][source], (key, got)
        assert got["test_recall"] == round(row["value"][0], 4), (key, got, row)
        weights = repo / f"data/models/reference_{key}/weights.pt"
        imgsz = json.loads((weights.parent / "train.json").read_text())["detect_imgsz"]
        gemm = trained_gemm(str(weights))  # the kernels the weights were trained on (as the detect stage)
        with portable(1, gemm=gemm):
            det = load_detector("yolo", weights, DetectorOptions(
                imgsz=imgsz, gemm=gemm, tiling=TilingParams(tile=recipes.row_tile(repo / "dvc.yaml", key))))
            own = score_on_source(det, repo / f"data/sources/{source}.parquet", key)
        assert (own["rule"], own["threshold"], own["test_recall"]) == (got["rule"], got["threshold"],
                                                                       got["test_recall"]), (key, own, got)
        assert got["rule"] == ("seed001" if key == "smoke" else "scores")


def _two_training_seeds(repo: Path, env: dict, dvc: list[str], params: dict) -> None:
    """reference.seeds: 2 trains one more seed per reference (nothing else retrains), scores it with
    the row's own detect and evaluate lines, and the board says 2 seeds and shows the spread; a
    later evaluation change rescoring the seeds retrains none."""
    assert json.loads((repo / "seeds/reference_sar/seeds.json").read_text())["seeds"] == [0]  # seeds: 1
    assert "reference\\_sar: 1 training seed (seed 0" in (repo / "leaderboard/README.md").read_text()
    params["reference"] = {"seeds": 2}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    ran = _ran(_run([*dvc, "repro"], repo, env))
    assert ran == ["leaderboard", "reference_seeds@sar", "reference_seeds@smoke", "train_seeds@sar",
                   "train_seeds@smoke"], ran
    for key in ("sar", "smoke"):
        seed1 = repo / f"data/models/reference_{key}_seeds/seed_1"
        assert json.loads((seed1 / "train.json").read_text())["params"]["seed"] == 1
        assert (seed1 / "weights.pt").read_bytes() != (repo / f"data/models/reference_{key}/weights.pt").read_bytes()
        table = pl.read_parquet(repo / f"seeds/reference_{key}/seeds.parquet")
        row = pl.read_parquet(repo / f"results/reference_{key}/metrics.parquet").filter(pl.col("stratum").is_null())
        assert sorted(table["seed"].unique().to_list()) == [0, 1]
        assert table.filter(pl.col("primary"))["seed"].unique().to_list() == [0]
        mine = table.filter(pl.col("seed") == 0).sort(["config", "metric"])
        assert mine["value"].to_list() == row.sort(["config", "metric"])["value"].to_list()  # the row itself
        configs = set(table.filter(pl.col("seed") == 1)["config"])
        assert "clean" in configs and "low_light_s3" in configs
    board = (repo / "leaderboard/README.md").read_text()
    assert "reference\\_sar: 2 training seeds (0, 1;" in board and "### Recall across training seeds: `reference_sar`" in board
    assert 'class="seed-spread"' in (repo / "leaderboard/site/index.html").read_text()
    assert not list((repo / "seeds").glob("*/scratch"))  # the seeds' scratch submissions are not kept


def test_run_outside_a_checkout_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run"]) == 2
    assert "dvc.yaml" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_fast_project_from_before_the_src_layout_is_migrated(tmp_path):
    """A scratch project whose git tracks a copy of the package at ``aegisbench/`` (the dataset
    repo's path now, a DVC output): the copy leaves the disk and git's index, so DVC accepts the
    output."""
    import subprocess

    dest = tmp_path / "fast"
    (dest / "aegisbench").mkdir(parents=True)
    (dest / "aegisbench" / "__init__.py").write_text("# the package, as the scratch copy of 0.6.0 held it\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    for args in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "old layout"]):
        subprocess.run(args, cwd=dest, env=env, check=True)
    prepare_project(ROOT, dest, fast_params(yaml.safe_load((ROOT / "params.yaml").read_text())))
    tracked = subprocess.run(["git", "ls-files", "--", "aegisbench"], cwd=dest, capture_output=True, text=True,
                             check=True).stdout
    assert tracked == "" and not (dest / "aegisbench").exists()
    assert (dest / "src" / "aegisbench" / "__init__.py").is_file()
    head = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=dest, capture_output=True,
                          text=True, check=True).stdout.split()
    assert not [p for p in head if p.startswith("aegisbench/")] and "dvc.yaml" in head
