"""Hostile dataset repos (issue 16 item 1): the identity of a repo is derived from its content.

A tester who controls the repo folder rewrites shards, the manifest and the card; ``verify``
(and every consumer through ``require_verified``) must recompute each shard's content from
its decoded rows, the digest from those, and the card from the manifest, and keep every
manifest path inside the repo. All on one tiny real build (image and fire-spread shards).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _evalkit import gt_table, materialize, tiny_params, write_submission
from aegisbench.builders.build import build_repo
from aegisbench.dataset.card import card_inputs, render_card
from aegisbench.releases import RELEASED
from aegisbench.dataset.schema import content_key
from aegisbench.dataset.manifest import dataset_digest, iter_shards, load_manifest, rows_sha256
from aegisbench.dataset.verify import require_verified, verify_repo
from aegisbench.dataset.shard_content import shard_facts
from aegisbench.cli import main
from aegisbench.errors import BadInput, VerificationError
from aegisbench.dataset.index import DatasetIndex, read_split_gt
from aegisbench.hashing import file_sha256, json_sha256
from aegisbench.params import Params

SOURCES = {"synthetic_sar": {"n_train": 1, "n_val": 2, "n_test": 3, "images_per_flight": 1},
           "synthetic_smoke": {"n_train": 1, "n_val": 1, "n_test": 1, "frames_per_sequence": 3}}
FIRESPREAD = {"grid": [12, 12], "realizations": 6, "s_levels": [0, 20], "initial_conditions": 2,
              "test_initial_conditions": [1], "realizations_per_shard": 4}
SAR = "clean/synthetic_sar-00000-of-00002.parquet"  # rows_per_shard 2: the 3 SAR test images in 2 shards


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """The honest repo (never modified) and a GT submission made from it."""
    root = tmp_path_factory.mktemp("integrity")
    params = tiny_params(root, SOURCES, ["low_light_s3"], firespread=FIRESPREAD, rows_per_shard=2)
    materialize(params)
    build_repo(params, progress=False)
    repo = Path(params.dataset_dir)
    index = DatasetIndex(repo, verify=False)
    sub = write_submission(root / "sub", index, "sar", gt_table(index, "sar"))
    return repo, sub


@pytest.fixture
def repo(honest, tmp_path):
    return Path(shutil.copytree(honest[0], tmp_path / "repo", symlinks=True))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AEGISBENCH_CACHE", str(tmp_path / "cache"))


def _manifest(repo: Path) -> dict:
    return json.loads((repo / "manifest.json").read_text())


def _save(repo: Path, m) -> None:
    (repo / "manifest.json").write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")


def _entry(m: dict, rel: str) -> dict:
    return next(s for *_, s in iter_shards(m) if s["path"] == rel)


def _rehash(repo: Path, m: dict, *rels: str) -> dict:
    """What the hostile tester did: update only the file hash / size of ``rels``."""
    for rel in rels:
        sha, size = file_sha256(repo / rel), (repo / rel).stat().st_size
        m["files"][rel] = {"sha256": sha, "bytes": size}
        for *_, shard in iter_shards(m):
            if shard["path"] == rel:
                shard.update(sha256=sha, bytes=size)
    return m


def _rewrite(path: Path, edit) -> list[dict]:
    """Rewrite a shard as another valid Parquet file of the same schema, rows edited."""
    table = pq.read_table(path)
    rows = [edit(dict(r)) for r in table.to_pylist()]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    return rows


def _other_truth(row: dict) -> dict:
    """Other ground truth whatever the draw: every box removed, or one person added to a frame
    that had none (a draw of the tiny fixture can leave a shard without people)."""
    if row["objects"]["bbox"]:
        return {**row, "objects": {"bbox": [], "label": []}}
    return {**row, "objects": {"bbox": [[4.0, 4.0, 24.0, 40.0]], "label": ["person"]}}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _evaluate(sub: Path, repo: Path, out: Path, *extra: str) -> int:
    return main(["evaluate", str(sub), "--dataset", str(repo), "--out", str(out), "--n-resamples", "10", *extra])


# ------------------------------------------------------------------ honest


def test_honest_repo_passes_and_its_content_recomputes_to_the_manifest(honest, capsys):
    repo, _ = honest
    m, files = _manifest(repo), sorted(repo.rglob("*"))
    report = verify_repo(repo)
    assert report.ok, report.lines()
    kinds = set()
    for config, _, _, shard in iter_shards(m):  # the verifier's recipe is the builder's, shard by shard
        facts = shard_facts((repo / shard["path"]).read_bytes(), config)
        assert (facts.rows, facts.content_sha256, facts.images, facts.problems) == (
            shard["rows"], shard["content_sha256"], shard["images"], ())
        kinds.add(config.split("_")[0])
    assert {"clean", "low", "firespread"} <= kinds
    assert main(["verify", str(repo)]) == 0
    v = m["benchmark_version"]
    assert capsys.readouterr().out.strip() == (f"{repo}: OK ({len(m['files'])} files, digest {m['dataset_digest']}: "
                                               f"not a released digest: benchmark {v} of the embedded default was "
                                               f"released as {RELEASED[v][:12]})")
    assert verify_repo(repo, cache=True).ok and sorted(repo.rglob("*")) == files  # nothing written into the repo


# ------------------------------------------------------------------ shards


def test_replaced_shard_with_rehashed_file_entry_fails_and_evaluate_refuses(repo, honest, tmp_path, capsys):
    before = pq.read_table(repo / SAR).to_pylist()
    after = _rewrite(repo / SAR, _other_truth)  # the ground truth altered: boxes removed (or one added)
    assert [r["objects"] for r in after] != [r["objects"] for r in before]
    _save(repo, _rehash(repo, _manifest(repo), SAR))
    report = verify_repo(repo)
    assert not report.ok and not report.altered and not report.digest_mismatch  # file hashes and digest "agree"
    assert f"{SAR}: the content hash recomputed from its rows is not the manifest's content_sha256" in report.content
    assert any(c.startswith("manifest.json: the dataset digest recomputed from the shards' rows is ")
               for c in report.content)
    assert main(["verify", str(repo)]) == 2
    err = capsys.readouterr().err
    assert f"{repo}: content: {SAR}: the content hash recomputed" in err
    assert _evaluate(honest[1], repo, tmp_path / "results") == 2
    assert SAR in _one_line_error(capsys) and not (tmp_path / "results").exists()


def test_a_consistent_rewrite_passes_only_under_a_new_digest(repo, honest, capsys):
    m = _manifest(repo)
    rows = _rewrite(repo / SAR, _other_truth)
    _rehash(repo, m, SAR)
    row_hashes = [json_sha256(content_key(r)) for r in rows]  # as the builder would
    _entry(m, SAR)["content_sha256"] = rows_sha256("".join(row_hashes))
    split = m["configs"]["clean"]["splits"]["synthetic_sar"]
    split["content_sha256"] = rows_sha256("".join(
        "".join(row_hashes) if s["path"] == SAR else
        shard_facts((repo / s["path"]).read_bytes(), "clean").row_hashes for s in split["shards"]))
    m["dataset_digest"] = dataset_digest(m["benchmark_version"], m["configs"])
    _save(repo, m)
    content = verify_repo(repo).content  # the card states the old digest and the old shard size
    assert content and all(c.startswith("README.md: the card ") for c in content), content
    card = repo / "README.md"
    card.write_text(render_card(m, *card_inputs(card.read_text())))
    _save(repo, _rehash(repo, m, "README.md"))
    assert verify_repo(repo).ok  # a consistent repo, but another dataset: its identity changed
    released = _manifest(honest[0])["dataset_digest"]
    assert m["dataset_digest"] != released
    # ... which verify --expect names: the digest that was released is the one a user pins
    assert main(["verify", str(repo), "--expect", released]) == 2
    err = _one_line_error(capsys)
    assert f"the dataset digest is {m['dataset_digest']}, not the expected {released}" in err
    assert main(["verify", str(honest[0]), "--expect", released]) == 0


def test_source_text_in_the_card_is_inert(tmp_path):
    """A source description carrying a heading, an image with an onerror handler and a
    javascript: link, and a citation that tries to close its code fence, are data in the card:
    escaped, capped, fenced; the repo verifies, and the card verify re-renders is the same."""
    hostile = ("# Owned\n<img src=x onerror=alert(1)> [click](javascript:alert(1)) | broken table "
               + "x" * 1500)
    params = tiny_params(tmp_path, SOURCES, [], firespread=None)
    raw = dict(params.raw)
    raw["sources"] = {k: dict(v, description=hostile, citation="@misc{x, note={\n```\n<script>alert(1)</script>}}")
                      for k, v in raw["sources"].items()}
    params = Params.from_dict(raw)
    materialize(params)
    build_repo(params, progress=False)
    repo = Path(params.dataset_dir)
    card = (repo / "README.md").read_text()
    body = card[:card.index("<!-- aegisbench-card-inputs")]
    assert "<img" not in body and "[click](javascript" not in body and "\n# Owned" not in body
    assert "&lt;img src=x onerror=alert(1)&gt; \\[click\\](javascript:alert(1)) \\| broken table" in body
    assert "x" * 600 not in body and "x" * 400 in body  # capped
    assert "````bibtex" in body and "<script>" not in body.split("````bibtex")[0]
    assert verify_repo(repo).ok


@pytest.mark.parametrize("pair", [(SAR, "clean/synthetic_sar-00001-of-00002.parquet"),
                                  (SAR, "low_light_s3/synthetic_sar-00000-of-00002.parquet"),
                                  (SAR, "clean/synthetic_sar_val-00000-of-00001.parquet")],
                         ids=["same-split", "other-config", "other-split"])
def test_swapped_shards_fail(repo, pair):
    a, b = pair
    m = _manifest(repo)
    os.replace(repo / a, repo / "swap.tmp")
    os.replace(repo / b, repo / a)
    os.replace(repo / "swap.tmp", repo / b)
    ea, eb = _entry(m, a), _entry(m, b)  # entries follow the bytes; paths stay
    keep = ("sha256", "bytes", "rows", "content_sha256", "images")
    va, vb = {k: ea[k] for k in keep}, {k: eb[k] for k in keep}
    ea.update(vb)
    eb.update(va)
    m["files"][a], m["files"][b] = m["files"][b], m["files"][a]
    _save(repo, m)
    report = verify_repo(repo)
    assert not (report.ok or report.altered or report.missing or report.extra)
    assert not report.digest_mismatch  # the split hashes still give the declared digest, but their rows do not:
    assert f"clean/synthetic_sar: the content hash recomputed from its rows is not the manifest's split " \
        "content_sha256" in report.content  # the digest covers where each row sits
    assert any(c.startswith("manifest.json: the dataset digest recomputed") for c in report.content)
    if "low_light" in b:  # rows that name another config
        first = pq.read_table(repo / a, columns=["image_id"]).column("image_id")[0].as_py()
        assert f"{a}: row 0 ({first}): condition 'low_light_s3' is not the config 'clean'" in report.content


@pytest.mark.parametrize("kind", ["realizations", "statistic"])
def test_altered_firespread_shard_fails(repo, kind):
    m = _manifest(repo)
    config = "firespread_statistic" if kind == "statistic" else "firespread_s20"
    rel = m["configs"][config]["splits"]["firespread"]["shards"][0]["path"]

    def edit(row):
        if kind == "statistic":
            counts = [[list(c) for c in frame] for frame in row["burn_counts"]]
            counts[-1][0][0] += 1
            return {**row, "burn_counts": counts}
        tau = [list(r) for r in row["ignition_time"]]
        tau[0][0] = 7 if tau[0][0] != 7 else 8
        return {**row, "ignition_time": tau}

    _rewrite(repo / rel, edit)
    _save(repo, _rehash(repo, m, rel))
    assert f"{rel}: the content hash recomputed from its rows is not the manifest's content_sha256" \
        in verify_repo(repo).content


def test_a_sha256_column_that_lies_about_the_pixels_fails(repo):
    _rewrite(repo / SAR, lambda r: {**r, "sha256": "0" * 64})
    _save(repo, _rehash(repo, _manifest(repo), SAR))
    content = verify_repo(repo).content
    assert any(c.startswith(f"{SAR}: row 0 (") and c.endswith("its sha256 column is not the hash of its decoded "
                                                                "pixels") for c in content), content


def test_replaced_image_pixels_fail_even_with_matching_hash_columns(repo):
    other = pq.read_table(repo / "low_light_s3/synthetic_sar-00000-of-00002.parquet").to_pylist()
    _rewrite(repo / SAR, lambda r: {**r, "image": next(o["image"] for o in other if o["image_id"] == r["image_id"])})
    _save(repo, _rehash(repo, _manifest(repo), SAR))  # the stored sha256 column still names the clean pixels
    content = verify_repo(repo).content
    assert f"{SAR}: the content hash recomputed from its rows is not the manifest's content_sha256" in content
    assert any("per-image pixel hashes differ from the manifest (2 differ" in c for c in content)


# ------------------------------------------------------------------ paths


def _move_shard(m: dict, rel: str, new: str) -> dict:
    m["files"][new] = m["files"].pop(rel)
    _entry(m, rel)["path"] = new
    return m


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x.parquet", "clean/../../x.parquet", "clean//x.parquet",
                                 "./clean/x.parquet"])
def test_manifest_paths_outside_the_repo_are_refused(repo, honest, tmp_path, capsys, bad):
    m = _move_shard(_manifest(repo), SAR, bad)
    if bad == "/etc/passwd":  # the tester's manifest even holds the true hash of the file it names
        m["files"][bad] = {"sha256": file_sha256(bad), "bytes": Path(bad).stat().st_size}
    _save(repo, m)
    assert main(["verify", str(repo)]) == 2
    assert f"manifest path {bad!r}" in _one_line_error(capsys)
    for extra in ((), ("--no-verify",)):
        assert _evaluate(honest[1], repo, tmp_path / "results", *extra) == 2
        assert f"manifest path {bad!r}" in _one_line_error(capsys)
    with pytest.raises(BadInput, match="manifest path"):
        DatasetIndex(repo, verify=False)


def test_paths_through_symlinks_are_refused(repo, tmp_path, capsys):
    outside = tmp_path / "outside.parquet"
    shutil.copy(repo / SAR, outside)  # byte-identical: every hash still matches
    (repo / SAR).unlink()
    (repo / SAR).symlink_to(outside)
    assert main(["verify", str(repo)]) == 2
    assert f"manifest path {SAR!r} goes through a symlink" in _one_line_error(capsys)
    (repo / SAR).unlink()
    shutil.move(str(repo / "low_light_s3"), tmp_path / "elsewhere")
    (repo / "low_light_s3").symlink_to(tmp_path / "elsewhere")
    shutil.copy(outside, repo / SAR)
    assert main(["verify", str(repo)]) == 2
    assert "goes through a symlink (low_light_s3)" in _one_line_error(capsys)


def test_shard_paths_must_be_listed_in_files_and_the_evaluator_checks_each_path(repo, capsys):
    m = _manifest(repo)
    del m["files"][SAR]
    _save(repo, m)
    assert main(["verify", str(repo)]) == 2
    assert f"shard path {SAR!r} of clean/synthetic_sar is not listed in files" in _one_line_error(capsys)
    info = dict(_manifest(repo)["configs"]["clean"]["splits"]["synthetic_sar"])
    info["shards"] = [{**info["shards"][0], "path": "../../etc/passwd"}]
    with pytest.raises(BadInput, match=r"manifest path '../../etc/passwd' has '..'"):
        read_split_gt(repo, "clean", "synthetic_sar", info)


# ------------------------------------------------------------------ manifest shape


MALFORMED = {
    "list": lambda m: [m],
    "null": lambda m: None,
    "no_files": lambda m: {k: v for k, v in m.items() if k != "files"},
    "no_configs": lambda m: {k: v for k, v in m.items() if k != "configs"},
    "no_digest": lambda m: {k: v for k, v in m.items() if k != "dataset_digest"},
    "no_version": lambda m: {k: v for k, v in m.items() if k != "benchmark_version"},
    "files_list": lambda m: {**m, "files": list(m["files"])},
    "digest_not_hex": lambda m: {**m, "dataset_digest": "x" * 64},
    "splits_list": lambda m: {**m, "configs": {**m["configs"], "clean": {"splits": []}}},
    "rows_text": lambda m: {**m, "files": {**m["files"], SAR: {**m["files"][SAR], "bytes": "12"}}},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_manifest_is_one_line_exit_2(repo, honest, tmp_path, capsys, case):
    _save(repo, MALFORMED[case](_manifest(repo)))
    assert main(["verify", str(repo)]) == 2
    assert "manifest" in _one_line_error(capsys)
    assert _evaluate(honest[1], repo, tmp_path / "results") == 2
    assert "manifest" in _one_line_error(capsys)


# ------------------------------------------------------------------ card


CARD_EDITS = {
    "appended": lambda t: t + "\nScores on this dataset are certified by the authors.\n",
    "licence": lambda t: t.replace("license: ", "license: cc-by-nc-4.0 #", 1),
    "citation_year": lambda t: t.replace("year   = {2026}", "year   = {2019}"),
    "digest_line": lambda t: t.replace("- dataset digest: `", "- dataset digest: `0", 1),
    "no_inputs": lambda t: t.split("<!-- aegisbench-card-inputs ")[0],
}


@pytest.mark.parametrize("edit", sorted(CARD_EDITS))
def test_card_edit_with_rehashed_manifest_fails(repo, capsys, edit):
    card = repo / "README.md"
    before = card.read_text()
    card.write_text(CARD_EDITS[edit](before))
    assert card.read_text() != before
    _save(repo, _rehash(repo, _manifest(repo), "README.md"))
    report = verify_repo(repo)
    assert not report.ok and all(c.startswith("README.md: the card ") for c in report.content), report.content
    assert main(["verify", str(repo)]) == 2
    assert f"{repo}: content: README.md: the card " in capsys.readouterr().err


def test_card_of_another_builder_version_is_checked_against_the_manifest(repo):
    m = _manifest(repo)
    m["builder_source_hash"] = "0" * 64  # built by other code: its card text may differ from ours
    _save(repo, m)
    assert verify_repo(repo).ok
    card = repo / "README.md"
    card.write_text(card.read_text().replace("num_examples: 3", "num_examples: 30"))
    _save(repo, _rehash(repo, m, "README.md"))
    assert verify_repo(repo).content == ["README.md: the card's YAML configs and split sizes are not the manifest's"]


# ------------------------------------------------------------------ fast path


def _decoded(caplog) -> list[int]:
    """Shards each verify call decoded (its debug log line)."""
    found = (re.search(r": (\d+) shards decoded, ", r.getMessage()) for r in caplog.records)
    return [int(m.group(1)) for m in found if m]


def test_fast_path_skips_decoding_verified_bytes_and_never_passes_changed_bytes(repo, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="aegisbench.dataset.verify")
    n = sum(1 for _ in iter_shards(_manifest(repo)))
    assert verify_repo(repo).ok and not (tmp_path / "cache").exists()  # verify: full decode, no records
    t0 = time.perf_counter()
    require_verified(repo)
    t1 = time.perf_counter()
    require_verified(repo)
    t2 = time.perf_counter()
    assert _decoded(caplog)[-2:] == [n, 0]
    assert t2 - t1 < t1 - t0
    assert len(list((tmp_path / "cache").rglob("*.json"))) == n + 1  # every shard and the card
    # in place, same size, same inode, mtime restored: the bytes differ, so the SHA-256 does
    path, st = repo / SAR, (repo / SAR).stat()
    original = path.read_bytes()
    with open(path, "r+b") as fh:
        fh.seek(st.st_size // 2)
        byte = fh.read(1)
        fh.seek(st.st_size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = path.stat()
    assert (now.st_size, now.st_ino, now.st_mtime_ns) == (st.st_size, st.st_ino, st.st_mtime_ns)
    with pytest.raises(VerificationError, match=f"altered: {SAR}"):
        require_verified(repo)
    # the tester also rehashes the manifest: a new SHA-256 misses the records, so it is decoded
    path.write_bytes(original)
    _rewrite(path, _other_truth)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    _save(repo, _rehash(repo, _manifest(repo), SAR))
    with pytest.raises(VerificationError, match=f"first: content: {SAR}: the content hash recomputed"):
        require_verified(repo)


def test_fast_path_records_survive_concurrent_writers_and_corrupt_records(repo, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="aegisbench.dataset.verify")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: require_verified(repo)["dataset_digest"], range(4)))
    assert len(set(results)) == 1
    records = {r: json.loads(r.read_text()) for r in sorted((tmp_path / "cache").rglob("*.json"))}
    assert len(records) == sum(1 for _ in iter_shards(_manifest(repo))) + 1  # no record lost or torn
    shard_record = next(r for r, doc in records.items() if doc["key"][0] == "shard")
    shard_record.write_text("{ not json")  # a torn or foreign record is a miss, never an error
    require_verified(repo)
    assert _decoded(caplog)[-1] == 1
    assert json.loads(shard_record.read_text()) == records[shard_record]  # written again
    card = repo / "README.md"  # a card edit misses its record
    card.write_text(CARD_EDITS["digest_line"](card.read_text()))
    _save(repo, _rehash(repo, _manifest(repo), "README.md"))
    with pytest.raises(VerificationError, match="README.md: the card "):
        require_verified(repo)
