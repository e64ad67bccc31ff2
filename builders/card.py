"""The dataset card (``README.md``) of a built repo: YAML that declares every config
(``configs:`` with ``data_files``, ``dataset_info`` with features and split sizes),
plus a human description of every config, the sources, their licences and citations.
"""

from __future__ import annotations

import yaml

from aegisbench.builders.hfrepo import FEATURES

CITATION = """@software{aegisbench,
  title  = {AegisBench: per-condition robustness benchmark for disaster-response perception},
  author = {{AegisBench developers}},
  year   = {2026},
  note   = {Benchmark version %s, dataset digest %s}
}"""


def features_of(config: str):
    """The declared features of one config (image rows, or fire-spread rows by kind)."""
    from aegisbench.builders.firespread import FIRESPREAD_FEATURES, config_kind, is_firespread_config
    return FIRESPREAD_FEATURES[config_kind(config)] if is_firespread_config(config) else FEATURES


def render_card(manifest: dict, descriptions: dict[str, str], sources: list[dict]) -> str:
    configs = manifest["configs"]
    licenses = sorted({s["license"] for s in sources}) or ["unknown"]
    front: dict = {
        "pretty_name": "AegisBench",
        "license": licenses[0] if len(licenses) == 1 else "other",
        "task_categories": ["object-detection"] + (["time-series-forecasting"] if any(
            s["track"] == "firespread" for s in sources) else []),
        "tags": ["robustness", "disaster-response", "search-and-rescue", "wildfire", "benchmark"],
        "configs": [],
        "dataset_info": [],
    }
    if len(licenses) > 1:
        front["license_name"] = "mixed: " + ", ".join(licenses)
    for name in sorted(configs, key=lambda c: (c != "clean", c)):
        splits = configs[name]["splits"]
        entry = {"config_name": name,
                 "data_files": [{"split": s, "path": f"{name}/{s}-*.parquet"} for s in sorted(splits)]}
        if name == "clean":
            entry["default"] = True
        front["configs"].append(entry)
        front["dataset_info"].append({
            "config_name": name, "features": features_of(name)._to_yaml_list(),
            "splits": [{"name": s, "num_examples": splits[s]["rows"],
                        "num_bytes": sum(x["bytes"] for x in splits[s]["shards"])}
                       for s in sorted(splits)],
        })
    head = yaml.safe_dump(front, sort_keys=False, width=100)
    version, digest = manifest["benchmark_version"], manifest["dataset_digest"]
    lines = [
        "---", head.rstrip(), "---", "",
        "# AegisBench", "",
        "Per-condition robustness benchmark for disaster-response perception: aerial person "
        "detection (search and rescue) and wildfire smoke detection under physically motivated "
        "corruptions, each condition its own config. Boxes are `objects.bbox` in full-frame "
        "pixels as `[x1, y1, x2, y2]`; corruptions are appearance-only, so boxes equal the clean ones.",
        "",
        f"- benchmark version: `{version}`",
        f"- dataset digest: `{digest}` (content hash; `aegisbench verify` re-checks every file)",
        "",
        "```python", "import datasets",
        f"ds = datasets.load_dataset(\"data/aegisbench\", \"{next(iter(sorted(configs)))}\")", "```",
        "", "## Configs", "", "| config | splits | rows | description |", "| --- | --- | --- | --- |",
    ]
    for name in sorted(configs, key=lambda c: (c != "clean", c)):
        splits = configs[name]["splits"]
        rows = sum(s["rows"] for s in splits.values())
        lines.append(f"| `{name}` | {', '.join(f'`{s}`' for s in sorted(splits))} | {rows} | "
                     f"{descriptions.get(name, '')} |")
    lines += ["", "Splits are named after the source dataset; `<source>_val` is clean validation "
              "(used once to freeze a detector's threshold), `<source>` is the test split.", "",
              "## Sources", "", "| source | track | kind | license | description |",
              "| --- | --- | --- | --- | --- |"]
    for s in sources:
        lines.append(f"| `{s['name']}` | {s['track']} | {s['kind']} | {s['license']} | {s['description']} |")
    cites = [s["citation"].strip() for s in sources if s.get("citation")]
    lines += ["", "## Citation", "", "```bibtex", CITATION % (version, digest), *cites, "```", ""]
    return "\n".join(lines)
