"""A card a maintainer can publish (issue 33 items 1 and 2): ``build --license/--citation/
--homepage/--description`` on a VOC folder with official split lists; the card parsed offline by
``huggingface_hub``'s card-data parser and ``datasets``' readers of its YAML; the Hugging Face
template's sections; BibTeX that parses; ``publish`` refusing an unknown licence or a source
without citation; official lists kept as they are (near-duplicates reported, removed only with
``--near-duplicates exclude``); the bad-input refusals (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from aegisbench.attribution import bibtex_entries, hub_license, spdx_license
from aegisbench.dataset.family_firespread import FIRESPREAD_SOURCE
from aegisbench.dataset.manifest import load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.cli import main
from aegisbench.errors import BadInput
from aegisbench.params import Params
from test_adapters import put, text
from test_adapters_layouts import scene, voc_xml

MAP = "Person=person,Car=none,DontCare=ignore"
BIB = ("@article{suo2023hituav,\n  title = {A thermal aerial set},\n  author = {Suo, Jiashun and Wang, Tianyi},\n"
       "  journal = {Scientific Data}, volume = {10}, pages = {227}, year = {2023}\n}\n")
SECTIONS = ("## Dataset Structure", "### Data Fields", "## Source Data", "## Personal and Sensitive Information",
            "## Bias, Risks, and Limitations", "## Licensing Information", "## Citation Information")


@pytest.fixture()
def thermal(tmp_path) -> Path:
    """A HIT-UAV-like VOC folder: 3 train, 2 val, 3 test in ImageSets/Main lists; val image
    ``v_dup`` is a brightened copy of test image ``t_0`` (a near-duplicate across the lists)."""
    root = tmp_path / "thermal"
    frames = {**{f"tr_{i}": "train" for i in range(3)}, "v_dup": "val", "v_1": "val",
              **{f"t_{i}": "test" for i in range(3)}}
    for stem, split in frames.items():
        img = scene("t_0" if stem == "v_dup" else stem, gray=True)
        if stem == "v_dup":
            img = np.clip(img.astype(np.int16) + 10, 0, 255).astype(np.uint8)
        put(root / "JPEGImages" / f"{stem}.jpg", img)
        text(root / "Annotations" / f"{stem}.xml", voc_xml(f"{stem}.jpg", 128, 96, [("Person", 10, 10, 30, 40),
                                                                                    ("Car", 50, 50, 90, 80)]))
    for split in ("train", "val", "test"):
        text(root / "ImageSets" / "Main" / f"{split}.txt", "".join(f"{s}\n" for s, sp in frames.items() if sp == split))
    return root


def _build(tmp_path, folder, *extra, out="repo") -> int:
    return main(["build", "--params", str(tmp_path / "no-params.yaml"), "--out", str(tmp_path / out),
                 "--source-dir", str(folder), "--source-format", "voc", "--source", "thermal_uav", "--modality", "thermal",
                 "--split-mode", "lists", "--class-map", MAP, *extra])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_card_with_licence_citation_and_the_hub_template(thermal, tmp_path, monkeypatch, capsys):
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hituav.bib").write_text(BIB)
    assert _build(tmp_path, thermal, "--license", "cc-by-4.0", "--citation", str(tmp_path / "hituav.bib"),
                  "--homepage", "https://example.org/hit-uav", "--description", "Thermal frames | from a UAV") == 0
    repo = tmp_path / "repo"
    assert verify_repo(repo).ok
    text_ = (repo / "README.md").read_text()
    card = DatasetCard(text_)  # huggingface_hub's own parser of the card's YAML, offline
    assert card.data.license == "cc-by-4.0" and card.data.pretty_name == "AegisBench"
    assert card.data.annotations_creators == ["found"] and card.data.source_datasets == ["extended|thermal_uav"]
    configs = MetadataConfigs.from_dataset_card_data(card.data)
    infos = DatasetInfosDict.from_dataset_card_data(card.data)
    manifest = load_manifest(repo)
    assert set(configs) == set(infos) == {c for c, v in manifest["configs"].items() if v["splits"]}
    assert {s: i.num_examples for s, i in infos["clean"].splits.items()} == {
        s: v["rows"] for s, v in manifest["configs"]["clean"]["splits"].items()}
    # the template's sections, in its order
    at = [text_.index(s + "\n") for s in SECTIONS]
    assert at == sorted(at)
    # Data Fields lists every column the shards hold
    fields = text_[text_.index("### Data Fields"):text_.index("## Source Data")]
    shard = next(repo.rglob("*.parquet"))
    for column in pq.read_schema(shard).names:
        assert f"| `{column}` |" in fields, column
    source = text_[text_.index("## Source Data"):text_.index("## Personal")]
    assert "[CC-BY-4.0](https://spdx.org/licenses/CC-BY-4.0.html)" in source
    assert "<https://example.org/hit-uav>" in source and "Thermal frames \\| from a UAV" in source
    assert "`thermal_uav` are real aerial" in text_
    # the citation block: the benchmark's and the source's BibTeX, parsing as one file
    block = text_[text_.index("```bibtex\n") + 10:text_.index("\n```\n", text_.index("```bibtex"))]
    assert bibtex_entries(block) == ["aegisbench", "suo2023hituav"]
    assert main(["publish", "--repo-id", "org/thermal", "--dataset", str(repo), "--dry-run"]) == 0
    assert "org/thermal" in capsys.readouterr().out


def test_publish_refuses_an_unknown_licence_and_a_source_without_citation(thermal, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _build(tmp_path, thermal, out="unknown") == 0  # builds (a warning), and the card says so
    front = yaml.safe_load((tmp_path / "unknown" / "README.md").read_text().split("\n---\n")[0][4:])
    assert front["license"] == "unknown"
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["publish", "--repo-id", "org/x", "--dataset", str(tmp_path / "unknown"), "--dry-run"]) == 2
    err = _one_line(capsys)
    assert "source 'thermal_uav' license" in err and "licence is unknown" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert _build(tmp_path, thermal, "--license", "MIT", "--replace", out="nocite") == 0
    capsys.readouterr()
    assert main(["publish", "--repo-id", "org/x", "--dataset", str(tmp_path / "nocite"), "--dry-run"]) == 2
    assert "source 'thermal_uav' citation" in _one_line(capsys)


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--license", "GPL", "'GPL' is not one SPDX licence id"),
    ("--license", "MIT OR Apache-2.0", "is not one SPDX licence id"),
    ("--citation", "@article{x, title={unclosed}", "the BibTeX does not parse"),
    ("--citation", "@misc{x}", "has no fields"),
    ("--homepage", "javascript:alert(1)", "is not an http(s) URL"),
], ids=["not-spdx", "expression", "bibtex-syntax", "bibtex-empty", "homepage"])
def test_bad_attribution_is_one_line_and_nothing_is_written(thermal, tmp_path, monkeypatch, capsys, flag, value, says):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert _build(tmp_path, thermal, flag, value) == 2
    err = _one_line(capsys)
    assert f"{flag}: " in err and says in err
    assert not (tmp_path / "repo").exists() and not (tmp_path / "data").exists()


def test_params_sources_are_checked_and_the_embedded_ones_are_filled():
    base = {"benchmark_version": "0.1.0"}
    for key, value, says in (("license", "Apache", "not one SPDX licence id"), ("citation", "hello", "no BibTeX entry"),
                             ("homepage", "ftp://x", r"not an http\(s\) URL")):
        with pytest.raises(BadInput, match=f"params.yaml: sources.s.{key}: .*{says}"):
            Params.from_dict({**base, "sources": {"s": {"track": "sar", "kind": "voc", key: value}}})
    # the repo's own params.yaml (the embedded default) and the fire-spread source are publishable
    sources = Params.load(Path(__file__).resolve().parents[1] / "params.yaml").sources
    for s in [*({"license": x.license, "citation": x.citation, "homepage": x.homepage} for x in sources),
              FIRESPREAD_SOURCE]:
        assert spdx_license(s["license"], allow_unknown=False) and bibtex_entries(s["citation"])
        assert s["homepage"].startswith("https://")
    assert len({k for s in sources for k in bibtex_entries(s.citation)}) == len(sources)  # no key twice


def test_licences_the_hub_does_not_list_are_other_with_a_name_and_link():
    assert hub_license(spdx_license("GPL-3.0")) == ("gpl-3.0", None)  # deprecated SPDX spelling, Hub id
    assert hub_license(spdx_license("0bsd")) == ("other", "0BSD")
    from aegisbench.dataset.card import _licenses
    assert _licenses([{"license": "0BSD"}]) == {"license": "other", "license_name": "0BSD",
                                                "license_link": "https://spdx.org/licenses/0BSD.html"}
    assert _licenses([{"license": "MIT"}, {"license": "CC-BY-4.0"}])["license_name"] == "mixed: CC-BY-4.0, MIT"


def test_official_lists_are_kept_and_near_duplicates_reported(thermal, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _build(tmp_path, thermal, "--license", "MIT") == 0
    rows = {s: v["rows"] for s, v in load_manifest(tmp_path / "repo")["configs"]["clean"]["splits"].items()}
    assert rows == {"thermal_uav": 3, "thermal_uav_val": 2}  # the official val list, as it is
    report = json.loads((tmp_path / "data/sources/thermal_uav.report.json").read_text())
    assert report["near_duplicate_policy"] == "report" and report["excluded"] == []
    assert [(d["image_id"], d["test_id"]) for d in report["near_duplicates"]] == [("v_dup", "t_0")]
    assert _build(tmp_path, thermal, "--license", "MIT", "--near-duplicates", "exclude", "--replace", out="dedup") == 0
    rows = {s: v["rows"] for s, v in load_manifest(tmp_path / "dedup")["configs"]["clean"]["splits"].items()}
    assert rows == {"thermal_uav": 3, "thermal_uav_val": 1}
    report = json.loads((tmp_path / "data/sources/thermal_uav.report.json").read_text())
    assert [d["image_id"] for d in report["excluded"]] == ["v_dup"]
