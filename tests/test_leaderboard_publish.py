"""``aegisbench publish``: the dry-run upload list, the refusal of a repo that fails verify, of
a client without credentials and of a release tag that exists; the upload through a
recording double of the Hub client (the only stand-in: the repo, the card and verify are
real). No network: HF_HUB_OFFLINE is set."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from aegisbench import cli
from aegisbench.builders.build import build_repo
from aegisbench.builders.source_table import SourceRecord, write_source_table
from aegisbench.errors import BadInput, VerificationError
from aegisbench.hashing import file_sha256, rng_for
from aegisbench.dataset.verify import verify_repo
from aegisbench.dataset.publish import check_repo_id, publish, publish_plan
from aegisbench.params import Params


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("publish")
    records = []
    for split, n in (("val", 3), ("test", 4)):
        for i in range(n):
            img = rng_for("publish-test", split, i).integers(0, 256, (24, 32, 3), dtype=np.uint8)
            records.append(SourceRecord.from_image(f"p_{split}_{i}", split, "demo", img, boxes=[[2.0, 3.0, 12.0, 15.0]],
                                                   labels=["person"], group_id=f"g{i}"))
    write_source_table(records, tmp / "sources" / "demo.parquet")
    params = Params.from_dict({
        "benchmark_version": "0.1.0", "paths": {"sources": str(tmp / "sources"), "dataset": str(tmp / "repo")},
        "build": {"rows_per_shard": 2},
        "sources": {"demo": {"track": "sar", "kind": "synthetic_sar", "license": "mit", "description": "demo",
                             "citation": "@misc{demo, title={Demo frames}, year={2026}}"}},
    })
    build_repo(params, progress=False)
    return tmp / "repo"


@pytest.fixture
def main(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if "aegisbench.leaderboard.commands" not in cli.COMMAND_MODULES:
        monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "aegisbench.leaderboard.commands"])
    return cli.main


def test_dry_run_lists_exactly_the_manifest_files(repo, main, capsys):
    manifest = json.loads((repo / "manifest.json").read_text())
    (repo / ".cache").mkdir(exist_ok=True)
    (repo / ".cache" / "lock").write_text("local only")  # hidden local state is never uploaded
    plan = publish("aegis-org/aegisbench", repo, dry_run=True)
    assert [i.path for i in plan] == sorted([*manifest["files"], "manifest.json"])
    assert "README.md" in manifest["files"] and any(p.endswith(".parquet") for p in manifest["files"])
    for item in plan:
        assert item.sha256 == file_sha256(repo / item.path) and item.bytes == (repo / item.path).stat().st_size

    assert main(["publish", "--repo-id", "aegis-org/aegisbench", "--dataset", str(repo), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [ln.split("\t")[0] for ln in out[:-1]] == [i.path for i in plan]
    assert out[-1].startswith(f"dry run: {len(plan)} files, {sum(i.bytes for i in plan)} bytes")


class RecordingHub:
    """Stands in for huggingface_hub.HfApi (no network): answers like the Hub, records
    every call; ``token=None`` is a client without credentials, ``tags`` the repo's tags."""

    def __init__(self, token="hf_test", tags=()):
        self.token, self.tags, self.calls = token, list(tags), []

    def whoami(self):
        self.calls.append(("whoami",))
        if self.token is None:
            from huggingface_hub.errors import LocalTokenNotFoundError
            raise LocalTokenNotFoundError("Token is required but no token found")
        return {"name": "tester"}

    def create_repo(self, repo_id, **kw):
        self.calls.append(("create_repo", repo_id, kw))

    def list_repo_refs(self, repo_id, **kw):
        self.calls.append(("list_repo_refs", repo_id, kw))
        return SimpleNamespace(branches=[], tags=[SimpleNamespace(name=t) for t in self.tags])

    def create_commit(self, **kw):
        self.calls.append(("create_commit", kw))
        return SimpleNamespace(oid="c0ffee" * 6 + "beef")

    def create_tag(self, repo_id, **kw):
        self.calls.append(("create_tag", repo_id, kw))
        self.tags.append(kw["tag"])


def _materialize(ops, folder: Path) -> Path:
    """The Hub copy: every uploaded file written where the commit puts it."""
    for op in ops:
        data = op.path_or_fileobj if isinstance(op.path_or_fileobj, bytes) else Path(op.path_or_fileobj).read_bytes()
        (folder / op.path_in_repo).parent.mkdir(parents=True, exist_ok=True)
        (folder / op.path_in_repo).write_bytes(data)
    return folder


def test_publish_uploads_the_plan_in_one_commit_and_tags_the_release(repo, tmp_path):
    local_card = (repo / "README.md").read_bytes()
    local_manifest = (repo / "manifest.json").read_bytes()
    api = RecordingHub()
    plan = publish("aegis-org/aegisbench", repo, api=api)
    assert [c[0] for c in api.calls] == ["whoami", "create_repo", "list_repo_refs", "create_commit", "create_tag"]
    assert api.calls[1] == ("create_repo", "aegis-org/aegisbench", {"repo_type": "dataset", "exist_ok": True,
                                                                    "private": False})
    commit = api.calls[3][1]
    assert commit["repo_id"] == "aegis-org/aegisbench" and commit["repo_type"] == "dataset"
    ops = commit["operations"]
    assert [op.path_in_repo for op in ops] == [i.path for i in plan] == [i.path for i in publish_plan(repo)]
    tag = api.calls[4]
    assert tag[1] == "aegis-org/aegisbench" and tag[2]["tag"] == "v0.1.0" and tag[2]["revision"] == "c0ffee" * 6 + "beef"
    # the Hub copy: its card loads from the Hub at the tag, and it passes verify on its own
    hub = _materialize(ops, tmp_path / "hub")
    card = (hub / "README.md").read_text()
    assert 'datasets.load_dataset("aegis-org/aegisbench", "clean", revision="v0.1.0")' in card
    assert 'load_dataset("aegisbench"' not in card
    assert verify_repo(hub).ok
    hub_manifest = json.loads((hub / "manifest.json").read_text())
    assert hub_manifest["dataset_digest"] == json.loads(local_manifest)["dataset_digest"]
    for item in plan:
        assert item.sha256 == file_sha256(hub / item.path)
    # the local repo is untouched
    assert (repo / "README.md").read_bytes() == local_card and (repo / "manifest.json").read_bytes() == local_manifest


def test_an_existing_release_tag_is_never_moved(repo):
    api = RecordingHub(tags=["v0.1.0"])
    with pytest.raises(BadInput, match="already has the release tag v0.1.0"):
        publish("aegis-org/aegisbench", repo, api=api)
    assert [c[0] for c in api.calls] == ["whoami", "create_repo", "list_repo_refs"]  # nothing uploaded


def test_publish_without_credentials_uploads_nothing(repo, main, capsys, monkeypatch):
    api = RecordingHub(token=None)
    with pytest.raises(BadInput, match="no usable Hugging Face credentials"):
        publish("aegis-org/aegisbench", repo, api=api)
    assert api.calls == [("whoami",)]
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert main(["publish", "--repo-id", "aegis-org/aegisbench", "--dataset", str(repo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Hugging Face credentials" in err[0]  # the real client: no token (or offline)


def test_card_metadata_and_arrow_sizes(repo):
    import datasets
    import yaml

    from aegisbench.dataset.card import card_features

    text = (repo / "README.md").read_text()
    front = yaml.safe_load(text.split("\n---\n", 1)[0][4:])
    assert front["size_categories"] == ["n<1K"] and front["source_datasets"] == ["original"]
    assert front["annotations_creators"] == ["machine-generated"] and front["task_ids"] == ["person-detection"]
    assert front["license"] == "mit" and "license_link" not in front  # a Hub licence id: the Hub links it
    manifest = json.loads((repo / "manifest.json").read_text())
    for info in front["dataset_info"]:
        splits = manifest["configs"][info["config_name"]]["splits"]
        assert info["download_size"] == sum(x["bytes"] for s in splits.values() for x in s["shards"])
        assert info["dataset_size"] == sum(s["num_bytes"] for s in info["splits"])
        for split in info["splits"]:  # num_bytes: the Arrow size datasets computes, not the file size
            files = sorted(str(repo / x["path"]) for x in splits[split["name"]]["shards"])
            ds = datasets.load_dataset("parquet", data_files={"x": files}, features=card_features(info["config_name"]),
                                       split="x")
            assert split["num_bytes"] == ds.info.splits["x"].num_bytes
            assert split["num_bytes"] != sum(x["bytes"] for x in splits[split["name"]]["shards"])
    # labels: a ClassLabel in the card only; load_dataset of the repo gives class ids, the shards keep strings
    ds = datasets.load_dataset(str(repo), "clean", split="demo", verification_mode="all_checks")
    label = ds.features["objects"]["label"].feature
    assert isinstance(label, datasets.ClassLabel) and label.names == ["person", "smoke"]
    assert {label.int2str(i) for row in ds for i in row["objects"]["label"]} == {"person"}
    import pyarrow.parquet as pq
    shard = repo / manifest["configs"]["clean"]["splits"]["demo"]["shards"][0]["path"]
    assert pq.read_table(shard).schema.field("objects").type.field("label").type.value_type == "string"


def test_refuses_to_publish_a_tampered_repo(repo, main, tmp_path, capsys):
    import shutil

    bad = tmp_path / "tampered"
    shutil.copytree(repo, bad)
    shard = sorted(bad.rglob("*.parquet"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(VerificationError, match="refusing to publish"):
        publish_plan(bad)
    for extra in ([], ["--dry-run"]):
        assert main(["publish", "--repo-id", "aegis-org/aegisbench", "--dataset", str(bad), *extra]) == 2
        err = capsys.readouterr().err
        assert "refusing to publish" in err and "altered" in err and shard.name in err
    shutil.copy(repo / shard.relative_to(bad), shard)
    (bad / "notes.txt").write_text("not in the manifest")
    assert main(["publish", "--repo-id", "aegis-org/aegisbench", "--dataset", str(bad)]) == 2
    assert "extra: notes.txt" in capsys.readouterr().err


def test_repo_id_is_checked(repo, main, capsys):
    for bad in ("aegisbench", "org/", "org/name/extra", "org/na me", "-org/name"):
        with pytest.raises(BadInput):
            check_repo_id(bad)
    assert main(["publish", "--repo-id", "not a repo", "--dataset", str(repo), "--dry-run"]) == 2
    assert "--repo-id" in capsys.readouterr().err
