"""The HF dataset repo writer, manifest, verify and resumable builds, on real Parquet."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

import aegisbench
from aegisbench.builders.build import build_repo, plan_tasks, staging_dir
from aegisbench.dataset.builder_code import builder_source_hash
from aegisbench.builders.hfrepo import ShardEntry, write_shard
from aegisbench.dataset.manifest import dataset_digest, load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.builders.source_table import SourceRecord, write_source_table
from aegisbench.cli import main
from aegisbench.hashing import pixel_sha256, rng_for
from aegisbench.params import Params


def make_records(counts=(("train", 2), ("val", 5), ("test", 9)), size=(40, 56)):
    for split, n in counts:
        for i in range(n):
            rng = rng_for("test-repo", split, i)
            img = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            x = float(rng.integers(0, 20))
            yield SourceRecord.from_image(f"demo_{split}_{i:03d}", split, "demo", img,
                                          boxes=[[x, 2.0, x + 9.5, 20.0]], labels=["person"],
                                          group_id=f"g{i // 2}")


def tiny_params(tmp: Path, rows_per_shard=3, version="0.1.0") -> Params:
    src = tmp / "sources"
    if not (src / "demo.parquet").exists():
        write_source_table(make_records(), src / "demo.parquet")
    return Params.from_dict({
        "benchmark_version": version,
        "paths": {"sources": str(src), "dataset": str(tmp / "repo")},
        "build": {"rows_per_shard": rows_per_shard},
        "sources": {"demo": {"track": "sar", "kind": "synthetic_sar", "license": "mit",
                             "description": "demo"}},
    })


@pytest.fixture
def built(tmp_path):
    params = tiny_params(tmp_path)
    build_repo(params, progress=False)
    return tmp_path / "repo", params


def test_repo_layout_card_and_load_dataset(built, tmp_path, monkeypatch):
    repo, _ = built
    manifest = load_manifest(repo)
    assert set(manifest["configs"]["clean"]["splits"]) == {"demo", "demo_val"}
    assert manifest["configs"]["clean"]["splits"]["demo"]["rows"] == 9
    assert sorted(p.name for p in (repo / "clean").iterdir()) == [
        "demo-00000-of-00003.parquet", "demo-00001-of-00003.parquet", "demo-00002-of-00003.parquet",
        "demo_val-00000-of-00002.parquet", "demo_val-00001-of-00002.parquet"]
    card = (repo / "README.md").read_text()
    assert "config_name: clean" in card and "dtype: image" in card and manifest["dataset_digest"] in card
    ds = datasets.load_dataset(str(repo), "clean")
    assert set(ds) == {"demo", "demo_val"}
    recs = {r.image_id: r for r in make_records()}
    for row in ds["demo"]:
        img = np.asarray(row["image"].convert("RGB"))
        src = recs[row["image_id"]]
        assert pixel_sha256(img) == row["sha256"] == src.sha256
        assert np.allclose(row["objects"]["bbox"], src.boxes)
        assert row["objects"]["label"] == [0]  # a ClassLabel in the card; the shard stores "person"
        assert ds["demo"].features["objects"]["label"].feature.int2str(0) == "person"
    assert "demo_train_000" not in {r["image_id"] for r in ds["demo"]}  # train stays out
    monkeypatch.chdir(tmp_path)
    shutil.copytree(repo, tmp_path / "aegisbench")
    assert len(datasets.load_dataset("aegisbench", "clean")["demo_val"]) == 5
    assert len(aegisbench.load("clean", path=str(repo))["demo"]) == 9


def test_two_builds_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ma = build_repo(tiny_params(a), progress=False)
    mb = build_repo(tiny_params(b), progress=False)
    assert ma == mb
    assert (a / "repo/manifest.json").read_bytes() == (b / "repo/manifest.json").read_bytes()
    for f in (a / "repo").rglob("*.parquet"):
        assert f.read_bytes() == (b / "repo" / f.relative_to(a / "repo")).read_bytes()


def test_digest_depends_on_content_and_version(tmp_path):
    m1 = build_repo(tiny_params(tmp_path / "a"), progress=False)
    m2 = build_repo(tiny_params(tmp_path / "b", rows_per_shard=2), progress=False)
    m3 = build_repo(tiny_params(tmp_path / "c", version="0.2.0"), progress=False)
    assert m1["dataset_digest"] != m3["dataset_digest"]
    # re-sharding changes the shards and their hashes, not the splits' content: the digest stays
    assert _shard_paths(m1) != _shard_paths(m2)
    assert m1["dataset_digest"] == m2["dataset_digest"]
    assert dataset_digest(m1["benchmark_version"], m1["configs"]) == m1["dataset_digest"]
    for config, cfg in m2["configs"].items():
        for split, info in cfg["splits"].items():  # the split hash, derived here from the Parquet rows
            rows = [r for s in info["shards"] for r in pq.read_table(tmp_path / "b/repo" / s["path"]).to_pylist()]
            keys = [[r["image_id"], r["sha256"], r["width"], r["height"], r["objects"]["bbox"], r["objects"]["label"],
                     r["group_id"], r["frame_index"], r["time_s"], r["fire_start_frame"], r["ignore"],
                     [[m["name"], m["value"]] for m in r["meta"]]] for r in rows]
            run = b"".join(hashlib.sha256(json.dumps(k, sort_keys=True, separators=(",", ":")).encode()).digest()
                           for k in keys)
            assert info["content_sha256"] == m1["configs"][config]["splits"][split]["content_sha256"] \
                == hashlib.sha256(run).hexdigest(), (config, split)


def _shard_paths(manifest: dict) -> list[str]:
    return [s["path"] for c in manifest["configs"].values() for i in c["splits"].values() for s in i["shards"]]


def test_verify_intact_and_tampered(built, capsys):
    repo, _ = built
    assert verify_repo(repo).ok
    assert main(["verify", str(repo)]) == 0
    shard = sorted((repo / "clean").glob("demo-*.parquet"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    gone = sorted((repo / "clean").glob("demo_val-*.parquet"))[0]
    gone.unlink()
    (repo / "clean" / "notes.txt").write_text("extra")
    report = verify_repo(repo)
    rel = lambda p: p.relative_to(repo).as_posix()  # noqa: E731
    assert report.altered == [rel(shard)]
    assert report.missing == [rel(gone)]
    assert report.extra == ["clean/notes.txt"]
    capsys.readouterr()
    assert main(["verify", str(repo)]) == 2
    err = capsys.readouterr().err
    assert f"altered: {rel(shard)}" in err and f"missing: {rel(gone)}" in err
    assert "extra: clean/notes.txt" in err


def test_verify_detects_edited_manifest(built):
    repo, _ = built
    original = (repo / "manifest.json").read_text()
    m = json.loads(original)
    m["configs"]["clean"]["splits"]["demo"]["content_sha256"] = "0" * 64  # a split's hash: the digest disagrees
    (repo / "manifest.json").write_text(json.dumps(m))
    report = verify_repo(repo)
    assert report.digest_mismatch
    assert "clean/demo: the content hash recomputed from its rows is not the manifest's split content_sha256" \
        in report.content
    m = json.loads(original)
    shard = m["configs"]["clean"]["splits"]["demo"]["shards"][0]
    shard["content_sha256"] = "0" * 64  # a shard's hash: its rows disagree
    (repo / "manifest.json").write_text(json.dumps(m))
    report = verify_repo(repo)
    assert not report.digest_mismatch and not report.ok
    assert f"{shard['path']}: the content hash recomputed from its rows is not the manifest's content_sha256" \
        in report.content


def test_a_format_1_manifest_is_refused_in_one_line(built, capsys):
    repo, _ = built
    m = json.loads((repo / "manifest.json").read_text())
    m["format"] = 1  # the shard-order digest of older builders
    (repo / "manifest.json").write_text(json.dumps(m))
    assert main(["verify", str(repo)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "manifest format 1" in err and "rebuild the repo with `aegisbench build`" in err


def test_a_sidecar_of_an_older_builder_is_not_resumed(built):
    repo, _ = built
    shard = load_manifest(repo)["configs"]["clean"]["splits"]["demo"]["shards"][0]
    old = {k: shard[k] for k in ("path", "sha256", "bytes", "rows", "content_sha256", "images")}  # no row_hashes
    assert ShardEntry.from_dict(old) is None
    entry = ShardEntry.from_dict({**old, "row_hashes": "0" * 64 * shard["rows"]})
    assert entry is not None and entry.rows == shard["rows"]


def test_verify_bad_paths(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["verify", str(tmp_path / "empty")]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_resume_reuses_finished_shards_and_hides_partials(tmp_path):
    params = tiny_params(tmp_path)
    reference = build_repo(tiny_params(tmp_path / "ref"), progress=False)
    # Simulate an interrupted run: the first two shards finished in staging, a temp file
    # of a third left behind. Nothing is visible at the output path yet.
    tasks = plan_tasks(params, Path(params.sources_dir))
    key_dir = staging_dir(tmp_path / "repo", params, tasks, builder_source_hash())
    key_dir.mkdir()
    first = [write_shard(t, key_dir, None) for t in tasks[:2]]
    (key_dir / "clean" / f".{tasks[2].relpath.split('/')[1]}.partial.tmp").write_bytes(b"half")
    mtimes = [(key_dir / e.path).stat().st_mtime_ns for e in first]
    assert not (tmp_path / "repo").exists()
    manifest = build_repo(params, progress=False)
    assert manifest == reference
    assert [(tmp_path / "repo" / e.path).stat().st_mtime_ns for e in first] == mtimes
    assert verify_repo(tmp_path / "repo").ok
    assert not list(tmp_path.glob(".repo.staging-*"))


def test_killed_build_leaves_nothing_visible_and_rerun_completes(tmp_path):
    """A real SIGKILL in the middle of a build, then a rerun."""
    write_source_table(make_records(counts=(("val", 30), ("test", 90)), size=(160, 200)),
                       tmp_path / "sources" / "demo.parquet")
    params_file = tmp_path / "params.yaml"
    params_file.write_text(textwrap.dedent(f"""
        benchmark_version: 0.1.0
        paths: {{sources: {tmp_path / 'sources'}, dataset: {tmp_path / 'repo'}}}
        build: {{rows_per_shard: 1}}
        sources: {{demo: {{track: sar, kind: synthetic_sar, license: mit}}}}
    """))
    cmd = [sys.executable, "-m", "aegisbench.cli", "build", "--params", str(params_file), "--skip-sources"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import time
    deadline = time.time() + 60
    while time.time() < deadline:
        done = list(tmp_path.glob(".repo.staging-*/.shards/*.json"))
        if len(done) >= 5:
            break
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert len(done) >= 5, "build finished too fast to interrupt"
    assert not (tmp_path / "repo").exists()
    rc = subprocess.run(cmd, capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    assert verify_repo(tmp_path / "repo").ok
    assert load_manifest(tmp_path / "repo")["configs"]["clean"]["splits"]["demo"]["rows"] == 90
