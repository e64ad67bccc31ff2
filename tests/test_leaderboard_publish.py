"""``aegisbench publish``: the dry-run upload list and the refusal of a repo that fails verify.
No network: HF_HUB_OFFLINE is set, and the refusal happens before any Hub call."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub.utils import filter_repo_objects

from aegisbench import cli
from aegisbench.builders.build import build_repo
from aegisbench.builders.source_table import SourceRecord, write_source_table
from aegisbench.errors import BadInput, VerificationError
from aegisbench.hashing import file_sha256, rng_for
from aegisbench.builders.publish import check_repo_id, publish, publish_plan
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
        "sources": {"demo": {"track": "sar", "kind": "synthetic_sar", "license": "mit", "description": "demo"}},
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


def test_upload_patterns_select_exactly_the_plan(repo):
    class Recorder:  # stands in for huggingface_hub.HfApi; records what would be sent
        def __init__(self):
            self.calls = []

        def create_repo(self, repo_id, **kw):
            self.calls.append(("create_repo", repo_id, kw))

        def upload_folder(self, **kw):
            self.calls.append(("upload_folder", kw))

    api = Recorder()
    plan = publish("aegis-org/aegisbench", repo, api=api)
    assert api.calls[0] == ("create_repo", "aegis-org/aegisbench", {"repo_type": "dataset", "exist_ok": True,
                                                                    "private": False})
    kw = api.calls[1][1]
    assert kw["repo_type"] == "dataset" and kw["folder_path"] == str(repo)
    on_disk = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    # huggingface_hub's own pattern matching picks exactly the planned files
    assert list(filter_repo_objects(on_disk, allow_patterns=kw["allow_patterns"])) == [i.path for i in plan]


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
