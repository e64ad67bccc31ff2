"""Rows you can trust (issue 31), on a real project: a detector run by ``aegisbench detect
--verified`` (an Ultralytics YOLO built from its YAML and trained one epoch), evaluated and put on
the leaderboard with the real commands.

* A folder elsewhere that takes the reference's name, with a copied ``submission.yaml`` and
  predictions made from the test labels, cannot replace the reference's results (exit 2, results
  byte-identical); put in the results folder by hand, it is skipped: results are bound to the
  files of the stored submission they claim.
* Verified means this project ran it: the attested run is ``verified``; the same files copied
  under another id, or changed after the run, are ``self-reported``.
* Predictions made from the test labels, submitted honestly, are scored, ``self-reported``,
  flagged as matching the published test labels, and ranked below the verified reference.
* ``detect`` records the model's metadata and computes its parameter count.
"""

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

from _detkit import trained_checkpoint
from _evalkit import gt_table, write_submission
from aegisbench.attestation import attest_files, row_status
from aegisbench.hashing import json_sha256

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``aegisbench ARGS`` in ``cwd`` (the project, whose private/ holds the attestations)."""
    env = {k: v for k, v in os.environ.items() if k != "AEGISBENCH_PRIVATE"}
    done = subprocess.run([sys.executable, "-P", "-m", "aegisbench.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    if check and done.returncode:
        raise AssertionError(f"aegisbench {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def project(tmp_path_factory, repo, index):
    root = tmp_path_factory.mktemp("trust") / "proj"
    (root / "submissions").mkdir(parents=True)
    weights = trained_checkpoint(ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml", root.parent / "w.pt")
    run("detect", "--detector", "yolo", "--weights", str(weights), "--dataset", str(repo), "--track", "sar",
        "--out", "submissions/reference_sar", "--reference", "--verified", "--architecture", "YOLO11-style tiny",
        "--paper", "https://example.org/paper", "--training-data", "synthetic frames", "--no-progress", cwd=root)
    write_submission(root / "submissions" / "gt_copy", index, "sar", gt_table(index, "sar"), name="labels")
    for sid in ("reference_sar", "gt_copy"):
        run("evaluate", f"submissions/{sid}", "--dataset", str(repo), "--out", "results", "--n-resamples", "20",
            "--no-verify", cwd=root)
    return root, weights


def board(root: Path, repo: Path, out: str = "leaderboard") -> pl.DataFrame:
    run("leaderboard", "--results", "results", "--dataset", str(repo), "--out", out, "--reference", "reference_sar",
        "--submissions", "submissions", cwd=root)
    return pl.read_parquet(root / out / "leaderboard.parquet")


def test_a_folder_named_like_the_reference_cannot_replace_its_results(project, repo, index, tmp_path):
    root, _ = project
    before = tree(root / "results" / "reference_sar")
    fake = tmp_path / "elsewhere" / "reference_sar"
    write_submission(fake, index, "sar", gt_table(index, "sar"))
    shutil.copy(root / "submissions" / "reference_sar" / "submission.yaml", fake / "submission.yaml")
    done = run("evaluate", str(fake), "--dataset", str(repo), "--out", "results", "--n-resamples", "20",
               "--no-verify", cwd=root, check=False)
    assert done.returncode == 2 and "holds the results of other files of a submission named 'reference_sar'" in (
        done.stderr)
    assert tree(root / "results" / "reference_sar") == before
    # evaluated somewhere else and copied into results/ by hand: bound to other files, so skipped
    run("evaluate", str(fake), "--dataset", str(repo), "--out", str(tmp_path / "res"), "--n-resamples", "20",
        "--no-verify", cwd=root)
    shutil.copytree(root / "results", tmp_path / "results-backup")
    try:
        shutil.rmtree(root / "results" / "reference_sar")
        shutil.copytree(tmp_path / "res" / "reference_sar", root / "results" / "reference_sar")
        long = board(root, repo, "lb-forged")
        assert "reference_sar" not in set(long["submission"])
        skipped = json.loads((root / "lb-forged" / "skipped.json").read_text())
        assert [s["folder"] for s in skipped] == ["reference_sar"] and "scored from other files" in skipped[0]["reason"]
    finally:
        shutil.rmtree(root / "results")
        shutil.copytree(tmp_path / "results-backup", root / "results")


def test_verified_only_when_we_ran_it_and_labels_are_flagged(project, repo):
    root, _ = project
    long = board(root, repo)
    status = dict(long.select("submission", "status").unique().iter_rows())
    assert status == {"reference_sar": "verified", "gt_copy": "self-reported"}
    flagged = dict(long.select("submission", "matches_test_labels").unique().iter_rows())
    assert flagged == {"reference_sar": False, "gt_copy": True}
    share = long.filter((pl.col("metric") == "label_match") & (pl.col("config") == "clean"))
    assert dict(share.select("submission", "value").iter_rows())["gt_copy"] == 1.0
    # ranked below the verified reference although its recall is perfect
    ranks = pl.read_parquet(root / "leaderboard" / "views" / "ranks.parquet").filter(
        (pl.col("metric") == "recall") & (pl.col("config") == "clean"))
    order = ranks.sort("rank")["submission"].to_list()
    recall = dict(long.filter((pl.col("metric") == "recall") & (pl.col("config") == "clean"))
                  .select("submission", "value").iter_rows())
    assert recall["gt_copy"] > recall["reference_sar"] and order == ["reference_sar", "gt_copy"]
    page = (root / "leaderboard" / "site" / "index.html").read_text()
    assert 'class="status-badge leak">matches the published test labels' in page
    assert '<span class="status verified">verified</span>' in page
    md = (root / "leaderboard" / "README.md").read_text()
    assert "self-reported; matches the published test labels" in md


def test_copies_and_changed_files_are_self_reported(project, repo):
    root, _ = project
    shutil.copytree(root / "submissions" / "reference_sar", root / "submissions" / "copycat")
    run("evaluate", "submissions/copycat", "--dataset", str(repo), "--out", "results", "--n-resamples", "20",
        "--no-verify", cwd=root)
    long = board(root, repo, "lb-copy")
    status = dict(long.select("submission", "status").unique().iter_rows())
    assert status["copycat"] == "self-reported" and status["reference_sar"] == "verified"
    prov = json.loads((root / "results" / "reference_sar" / "provenance.json").read_text())
    assert row_status(prov, root) == ("verified", None)
    changed = {**prov, "submission_files": {**prov["submission_files"], "predictions.parquet": "0" * 64}}
    assert row_status(changed, root)[0] == "self-reported" and "other files" in row_status(changed, root)[1]
    # an attestation made with another project's key does not verify here
    attest_files("reference_sar", prov["submission_files"], dataset_digest=prov["dataset_digest"],
                 weights_sha256=prov["weights_sha256"], by="someone else", root=root / "other")
    shutil.copy(root / "other" / "private" / "attestations" / "reference_sar.json",
                root / "private" / "attestations" / "forged.json")
    forged = {**prov, "submission": "forged"}
    assert row_status(forged, root) == ("self-reported", "the attestation of forged does not verify with this "
                                                         "project's private key")
    assert oct((root / "private" / "config.yaml").stat().st_mode & 0o777) == "0o600"


def test_detect_records_the_model_and_counts_its_parameters(project):
    root, weights = project
    meta = yaml.safe_load((root / "submissions" / "reference_sar" / "submission.yaml").read_text())
    from ultralytics import YOLO
    expected = sum(p.numel() for p in YOLO(str(weights)).model.parameters())
    assert (meta["architecture"], meta["paper"], meta["training_data"]) == (
        "YOLO11-style tiny", "https://example.org/paper", "synthetic frames")
    assert meta["parameters"] == expected > 0
    prov = json.loads((root / "results" / "reference_sar" / "provenance.json").read_text())
    assert prov["metadata"]["parameters"] == expected
    assert prov["content_sha256"] == json_sha256(prov["submission_files"])
    bad = run("detect", "--detector", "yolo", "--weights", str(weights), "--track", "sar", "--out", "submissions/x",
              "--team", "t", "--code", "javascript:alert(1)", cwd=root, check=False)
    assert bad.returncode == 2 and "--code: must be an http(s) URL" in bad.stderr


RELEASE_HEAD = ("model,dataset,family,corruption,severity,conf_thresh,n_images,n_gt,tp,fp,recall,recall_ci_lo,"
                "recall_ci_hi,precision,f1,map50,map50_95")
RELEASE_ROWS = ["fasterrcnn,heridal,clean,clean,0,0.99,101,337,251,27,0.7448,0.6636,0.8287,0.9029,0.8163,0.7853,0.5176",
                "fasterrcnn,heridal,storm,low_light,3,0.99,101,337,0,0,0.0,0.0,0.0,0.0,0.0,0.0099,0.0079",
                "yolo11,sard,clean,clean,0,0.3,862,1097,977,46,0.8906,0.8701,0.9101,0.955,0.9217,0.9277,0.601",
                "yolo11,sard,storm,low_light,1,0.3,862,1097,100,10,0.0912,0.07,0.11,0.909,0.167,0.2,0.1"]
PUB = ["--track", "sar", "--team", "Altis-2026", "--name", "reference release",
       "--protocol", "threshold frozen on clean val; 1000-resample bootstrap",
       "--source-url", "https://github.com/Altis-2026/AegisBench", "--citation", "Altis et al. (2026)"]


def test_published_rows_stand_beside_and_are_never_ranked(project, repo, tmp_path):
    root, _ = project
    table = tmp_path / "benchmark_168_conditions.csv"
    table.write_text("\n".join([RELEASE_HEAD, *RELEASE_ROWS]) + "\n")
    done = run("import-published", str(table), "--layout", "release", "--id", "release2026", *PUB, cwd=root)
    assert sorted(line.split()[1] for line in done.stdout.splitlines()) == [
        "results/release2026_fasterrcnn", "results/release2026_yolo11"]
    long = board(root, repo, "lb-published")
    pub = long.filter(pl.col("submission").str.starts_with("release2026"))
    assert set(pub["status"]) == {"published"} and set(pub["source"]) == {"heridal", "sard"}
    recall = pub.filter((pl.col("metric") == "recall") & (pl.col("config") == "low_light_s3"))
    assert recall.select("value", "lo", "hi").row(0) == (0.0, 0.0, 0.0)
    ranks = pl.read_parquet(root / "lb-published" / "views" / "ranks.parquet")
    assert not ranks.filter(pl.col("submission").str.starts_with("release2026")).height  # never ranked
    page = (root / "lb-published" / "site" / "index.html").read_text()
    assert "threshold frozen on clean val; 1000-resample bootstrap" in page
    assert 'href="https://github.com/Altis-2026/AegisBench"' in page and 'status-badge published' in page
    for sid in ("release2026_fasterrcnn", "release2026_yolo11"):
        shutil.rmtree(root / "results" / sid)


@pytest.mark.parametrize("rows, flags, expect", [
    (["source,config,metric,value", "sard,clean,accuracy,0.9"], [], "row 0 field metric: not a registered metric"),
    (["source,config,metric,value", "sard,clean,recall,1.5"], [], "row 0 field value: 1.5 lies outside the bounds"),
    (["source,config,metric,value,lo,hi", "sard,clean,recall,0.5,0.6,0.7"], [], "row 0 field lo: lo and hi"),
    (["source,config,metric,value", "sard,fog_s9,recall,0.5"], [], "row 0 field config: not a config"),
    (["source,config,metric,value", "sard,clean,recall,0.5"], ["--source-url", "javascript:alert(1)"],
     "--source-url: must be an http(s) URL"),
    (["source,config,metric,value", "sard,clean,recall,0.5"], ["--date", "2026-13-01"], "--date: must be a date"),
])
def test_published_rows_refuse_bad_input(project, tmp_path, rows, flags, expect):
    root, _ = project
    table = tmp_path / "t.csv"
    table.write_text("\n".join(rows) + "\n")
    args = [*PUB, *flags] if not flags else [*PUB[:PUB.index(flags[0])], *flags,
                                             *PUB[PUB.index(flags[0]) + 2:]] if flags[0] in PUB else [*PUB, *flags]
    done = run("import-published", str(table), "--id", "pub_bad", "--model", "m", *args, cwd=root, check=False)
    assert done.returncode == 2 and expect in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (root / "results" / "pub_bad").exists()


def test_labels_uploaded_to_the_server_are_flagged_and_ranked_below_the_verified_reference(project, repo, index,
                                                                                           tmp_path):
    """The same predictions made from the test labels, uploaded honestly to the hosted leaderboard of
    this project: scored, self-reported, flagged, and ranked below the verified reference."""
    from _servicekit import Server, Worker, add_team, files_of, upload, wait_final
    root, _ = project
    (root / "params.yaml").write_text(yaml.safe_dump({
        "benchmark_version": index.version, "paths": {"dataset": str(repo)}, "evaluation": {"n_resamples": 20},
        "hosting": {"references": ["reference_sar"], "versioning": "none", "lease_seconds": 4}}))
    token = add_team(root, "Label copiers")
    folder = write_submission(tmp_path / "upload", index, "sar", gt_table(index, "sar"), name="copied labels")
    server, worker = Server(root), Worker(root)
    try:
        sid = upload(server, token, files_of(folder)).json()["id"]
        assert wait_final(server, token, sid)["status"] == "scored"
    finally:
        worker.stop()
        server.stop()
    long = pl.read_parquet(root / "hosted" / "leaderboard" / "leaderboard.parquet")
    rows = dict(long.select("submission", "status").unique().iter_rows())
    assert rows[sid] == "self-reported" and rows["reference_sar"] == "verified"
    assert long.filter(pl.col("submission") == sid)["matches_test_labels"].all()
    ranks = pl.read_parquet(root / "hosted" / "leaderboard" / "views" / "ranks.parquet").filter(
        (pl.col("metric") == "recall") & (pl.col("config") == "clean"))
    order = ranks.sort("rank")["submission"].to_list()
    assert order.index("reference_sar") < order.index(sid)
