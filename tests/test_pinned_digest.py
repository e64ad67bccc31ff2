"""The embedded default build is pinned: any change to any pixel, box or id fails here.

If this fails because bytes changed on purpose, bump ``benchmark_version`` in params.yaml
and add the new digest to ``aegisbench/releases.py`` (old versions stay listed: their data is
immutable). The digest
is defined by the manifest format: format 1 hashed the shards' content hashes in order, format 2
(layout-free) each split's rows, so the same 0.5.0 data has one digest per format.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aegisbench.builders.build import build_repo
from aegisbench.builders.sources import materialize_source
from aegisbench.dataset.verify import verify_repo
from aegisbench.params import Params
from aegisbench.releases import RELEASED

ROOT = Path(__file__).resolve().parents[1]
FORMAT_1_DIGESTS = {  # the shard-order digest (manifest format 1), kept as history
    "0.1.0": "9b479f04fdd042fe14539fa01fb9ec142b7ccf6905582c42f023009fcb843de5",
    "0.2.0": "d134d847e917fc23be3fe447d61f8ec13ba864146e4067a867b181eee6d32682",  # + fire-spread ensembles
    "0.3.0": "71804930a34472af3b161fd44af4dca6654d9f5a31ec03e39fd3424d0c60d1fb",  # seed 003 model, held-out truth
    "0.4.0": "bad4cbafdfbbc984af77539313aa78c2bee3b69d5f7a3c05aabba5651a12040b",  # reference low light, haze dust, WARP cloud
    "0.5.0": "083a4edfa1e53acbf065ade7eb50f34151e87a777a1217277ec728deb4665fb4",  # ignore regions, meta, modality
}
PINNED_DIGESTS = RELEASED  # manifest format 2 (every split's rows, whatever the shard layout): the package's releases


@pytest.mark.slow
def test_embedded_default_digest_is_pinned(tmp_path):
    params = Params.load(ROOT / "params.yaml")
    raw = dict(params.raw, paths={"sources": str(tmp_path / "sources"), "dataset": str(tmp_path / "repo")})
    params = Params.from_dict(raw)
    for src in params.sources:
        materialize_source(src, params.benchmark_version, params.sources_dir)
    manifest = build_repo(params, workers=2, progress=False)
    assert verify_repo(tmp_path / "repo").ok
    assert params.benchmark_version in PINNED_DIGESTS, (
        f"benchmark_version {params.benchmark_version} has no pinned digest; add "
        f"{manifest['dataset_digest']!r}")
    assert manifest["dataset_digest"] == PINNED_DIGESTS[params.benchmark_version], (
        "the embedded default changed bytes without a version bump: bump benchmark_version "
        "in params.yaml and pin the new digest")
    shutil.rmtree(tmp_path / "repo")
