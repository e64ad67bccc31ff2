"""Withheld test labels (issue 31 item 3): a build whose test split carries no boxes in the public
repo (``load_dataset`` sees none) and whose labels live in a private label repo that ``verify``
checks and ``publish`` refuses; the evaluator, given the private repo, scores exactly as on an
ordinary build of the same data, and without it refuses in one line; a submitter validates
against the public repo alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _evalkit import TINY, gt_table, materialize, tiny_params, write_submission
from aegisbench.builders.build import build_repo
from aegisbench.dataset.verify import verify_repo
from aegisbench.dataset.labels import verify_labels
from aegisbench.cli import main
from aegisbench.dataset.index import DatasetIndex

CONDITIONS = ["low_light_s3"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """An ordinary build and a build withholding the synthetic_sar test split, of the same data."""
    root = tmp_path_factory.mktemp("withheld")
    ordinary = tiny_params(root / "a", TINY, CONDITIONS, dataset="repo")
    materialize(ordinary)
    build_repo(ordinary, progress=False)
    withheld = tiny_params(root / "b", TINY, CONDITIONS, dataset="repo", withhold_labels=["synthetic_sar"])
    shutil.copytree(ordinary.sources_dir, withheld.sources_dir)
    manifest = build_repo(withheld, progress=False, private_out=root / "b" / "private" / "labels")
    return Path(ordinary.dataset_dir), Path(withheld.dataset_dir), root / "b" / "private" / "labels", manifest


def test_the_public_repo_has_no_test_boxes_and_both_repos_verify(builds):
    ordinary, public, labels, manifest = builds
    assert manifest["withheld_labels"] == ["synthetic_sar"]
    for config in ("clean", "low_light_s3"):
        test = datasets.load_dataset(str(public), config, split="synthetic_sar")
        assert len(test) == 3 and all(row["objects"]["bbox"] == [] for row in test)
    val = datasets.load_dataset(str(public), "clean", split="synthetic_sar_val")
    assert any(row["objects"]["bbox"] for row in val)  # only the withheld split lost its boxes
    full = datasets.load_dataset(str(ordinary), "clean", split="synthetic_sar")
    assert any(row["objects"]["bbox"] for row in full)
    assert verify_repo(public).ok and verify_labels(labels, json.loads((public / "manifest.json").read_text())).ok
    assert not list(public.rglob("labels"))  # nothing of the private repo inside the public one
    card = (public / "README.md").read_text()
    assert "**Withheld labels**: `synthetic_sar`" in card
    m = json.loads((labels / "manifest.json").read_text())
    ordinary_digest = json.loads((ordinary / "manifest.json").read_text())["dataset_digest"]
    assert m["full_digest"] == ordinary_digest != manifest["dataset_digest"] == m["public_digest"]
    assert main(["verify", str(labels), "--dataset", str(public)]) == 0
    assert main(["verify", str(labels), "--dataset", str(ordinary)]) == 2  # labels of another dataset


def test_scores_equal_an_ordinary_build_and_need_the_private_repo(builds, tmp_path, capsys):
    ordinary, public, labels, _ = builds
    table = gt_table(DatasetIndex(ordinary), "sar", score=lambda c, s, i, k: [max(0.05, 0.95 - 0.2 * j) for j in range(k)])
    results = {}
    for name, repo in (("ordinary", ordinary), ("withheld", public)):
        sub = write_submission(tmp_path / name / "gt_run", DatasetIndex(repo, verify=False), "sar", table)
        assert main(["validate", str(sub), "--dataset", str(repo)]) == 0  # a submitter needs only the public repo
        extra = ["--labels", str(labels)] if name == "withheld" else []
        assert main(["evaluate", str(sub), "--dataset", str(repo), "--out", str(tmp_path / name / "res"),
                     "--n-resamples", "30", *extra]) == 0
        results[name] = pl.read_parquet(tmp_path / name / "res" / "gt_run" / "metrics.parquet")
    assert results["withheld"].equals(results["ordinary"])  # values and intervals, row for row
    capsys.readouterr()
    sub = tmp_path / "withheld" / "gt_run"
    assert main(["evaluate", str(sub), "--dataset", str(public), "--out", str(tmp_path / "none"),
                 "--n-resamples", "30"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "labels of ['synthetic_sar'] are withheld" in err[0]
    assert not (tmp_path / "none").exists()


def test_publish_refuses_the_label_repo_and_tampered_labels_fail(builds, tmp_path, capsys):
    _, public, labels, _ = builds
    assert main(["publish", "--repo-id", "org/aegis", "--dataset", str(labels), "--dry-run"]) == 2
    assert "refusing to publish a private label repo" in capsys.readouterr().err
    assert main(["publish", "--repo-id", "org/aegis", "--dataset", str(public), "--dry-run"]) == 0
    assert "labels/" not in capsys.readouterr().out
    bad = Path(shutil.copytree(labels, tmp_path / "labels"))
    path = bad / "labels" / "clean" / "synthetic_sar.parquet"
    rows = pq.read_table(path).to_pylist()
    row = next((r for r in rows if r["objects"]["bbox"]), rows[0])  # a draw can leave frames without people
    if row["objects"]["bbox"]:
        row["objects"]["bbox"][0][0] += 5.0  # a box moved
    else:
        row["objects"] = {"bbox": [[4.0, 4.0, 24.0, 40.0]], "label": ["person"]}  # or one added
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)
    assert main(["verify", str(bad)]) == 2
    assert "altered: labels/clean/synthetic_sar.parquet" in capsys.readouterr().err


def test_withholding_needs_a_private_path_outside_the_repo(tmp_path, capsys):
    params = tiny_params(tmp_path, TINY, [], dataset="repo", withhold_labels=["synthetic_sar"])
    materialize(params)
    with pytest.raises(Exception) as exc:
        build_repo(params, progress=False)
    assert "--private-out: withheld labels go to a private label repo" in str(exc.value)
    with pytest.raises(Exception) as exc:
        build_repo(params, progress=False, private_out=Path(params.dataset_dir) / "labels")
    assert "must lie outside the public dataset repo" in str(exc.value)
    params = tiny_params(tmp_path, TINY, [], dataset="repo", withhold_labels=["nope"])
    with pytest.raises(Exception) as exc:
        build_repo(params, progress=False, private_out=tmp_path / "p")
    assert "--withhold-labels: ['nope'] are not splits of this build" in str(exc.value)
    assert not Path(params.dataset_dir).exists() and not (tmp_path / "p").exists()


def test_a_private_synthetic_split_cannot_be_regenerated_from_the_public_code(tmp_path):
    """The embedded default can hold a private test split: a synthetic_sar source with ``private:
    true`` draws every image from a secret kept in private/ (not in params.yaml, not in git), and
    its test labels are withheld; the same params with another private/ give other images."""
    import os

    from aegisbench.params import Params
    from aegisbench.private import load_config
    hidden = {"n_train": 0, "n_val": 1, "n_test": 2, "images_per_flight": 1, "private": True}
    manifests, before = [], os.environ.get("AEGISBENCH_PRIVATE")
    for k in range(2):
        params = tiny_params(tmp_path / f"p{k}", TINY, [], dataset="repo", withhold_labels=["synthetic_sar_hidden"])
        raw = dict(params.raw, sources={**params.raw["sources"], "synthetic_sar_hidden": {
            "track": "sar", "kind": "synthetic_sar", "license": "mit", "description": "private test split",
            "options": hidden}})
        os.environ["AEGISBENCH_PRIVATE"] = str(tmp_path / f"private{k}")
        try:
            params = Params.from_dict(raw)
            materialize(params)
            manifests.append(build_repo(params, progress=False, private_out=tmp_path / f"private{k}" / "labels"))
            seed = load_config()["seeds"]["synthetic_sar_hidden"]
        finally:
            os.environ.pop("AEGISBENCH_PRIVATE")
            if before is not None:
                os.environ["AEGISBENCH_PRIVATE"] = before
        assert seed not in (tmp_path / f"p{k}" / "repo" / "README.md").read_text()
        assert "synthetic_sar_hidden" in manifests[-1]["withheld_labels"]
    hidden_images = [{i for s in m["configs"]["clean"]["splits"]["synthetic_sar_hidden"]["shards"]
                      for i in s["images"].values()} for m in manifests]
    public_images = [{i for s in m["configs"]["clean"]["splits"]["synthetic_sar"]["shards"] for i in s["images"].values()}
                     for m in manifests]
    assert hidden_images[0].isdisjoint(hidden_images[1])  # another secret, other pixels
    assert public_images[0] == public_images[1]  # the public source is the same data
