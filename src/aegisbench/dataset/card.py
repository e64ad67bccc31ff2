"""The dataset card (``README.md``) of a built repo: YAML that declares every config
(``configs:`` with ``data_files``, ``dataset_info`` with features and split sizes),
plus a human description of every config, the sources (with their sensor modality),
their licences and citations, and which (source, condition) cells were not built
because the condition's physics does not hold for the source's sensor
("n/a (not physical for thermal)").

The card ends with its inputs that the manifest does not hold (config descriptions,
source licences, citations and descriptions) as a hidden ``aegisbench-card-inputs``
comment, so ``verify`` re-renders the card from the manifest and those inputs and
compares (:func:`card_problems`).

>>> text = _inputs_block({"clean": "a <b> --> c"}, [])
>>> text.startswith("<!-- aegisbench-card-inputs {") and "-->" not in text[:-3], card_inputs(text)
(True, ({'clean': 'a <b> --> c'}, [], None, None))
"""

from __future__ import annotations

import inspect
import json
import re

import yaml

from aegisbench.attribution import UNKNOWN, hub_license, license_url
from aegisbench.dataset.card_sections import (citation_section, data_fields, is_synthetic, licensing,
                                               limitations, personal_information, source_data, warp_notes)
from aegisbench.hashing import canonical_json
from aegisbench.memory import release_arrow_memory
from aegisbench.dataset.families import families, features_of
from aegisbench.vocab import (CLEAN, COMPOUND, CORRUPTION, DETECTION_TRACKS, TRACK_LABELS, WARP_NOISE,
                              parse_corruption_config)

CITATION = """@software{aegisbench,
  title  = {AegisBench: per-condition robustness benchmark for disaster-response perception},
  author = {{AegisBench developers}},
  year   = {2026},
  note   = {Benchmark version %s, dataset digest %s}
}"""


#: the class names of ``objects.label`` (the detection tracks' one label each), as a ClassLabel
CLASS_NAMES = [TRACK_LABELS[t] for t in DETECTION_TRACKS]


def card_features(config: str):
    """The features the card declares: the shards' (:func:`features_of`), except that
    ``objects.label`` is a ``ClassLabel`` over :data:`CLASS_NAMES`, as HF detection
    datasets declare it; ``datasets`` casts the stored strings to class ids on load, so the
    shards (and the dataset digest) stay as they are."""
    import datasets

    features = features_of(config)
    if "objects" not in features:
        return features
    out = datasets.Features(features.copy())
    out["objects"] = {**features["objects"], "label": datasets.List(datasets.ClassLabel(names=CLASS_NAMES))}
    return out


#: the benchmark's own Hub task category, listed first; each family adds its own when its tracks are built
TASK_CATEGORIES = ("object-detection",)
#: upper bounds of the Hub's size categories (number of rows)
SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"))


def size_category(rows: int) -> str:
    """The Hub's ``size_categories`` value for a dataset of ``rows`` rows.

    >>> size_category(999), size_category(40_000)
    ('n<1K', '10K<n<100K')
    """
    return next((name for top, name in SIZE_CATEGORIES if rows < top), "n>100M")


def arrow_num_bytes(paths, features) -> int:
    """``num_bytes`` of a split as ``datasets`` computes it when it loads the Parquet files:
    the Arrow size (``Table.nbytes``) of every record batch (one per row group) cast to
    ``features`` (the card's: labels as class ids), summed; not the Parquet file size. The
    peak is one row group's, whatever the split's size."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets.table import table_cast

    schema = features.arrow_schema
    total = 0
    for path in paths:  # one file open at a time, its pages back to the system before the next
        with pq.ParquetFile(path) as pf:
            size = pf.metadata.row_group(0).num_rows if pf.metadata.num_row_groups else 1
            for batch in pf.iter_batches(batch_size=size, columns=list(features)):
                total += table_cast(pa.Table.from_batches([batch]).combine_chunks(), schema).nbytes
                del batch
        release_arrow_memory()
    return total


def arrow_sizes(repo, manifest: dict) -> dict[str, dict[str, int]]:
    """config -> split -> Arrow ``num_bytes`` of a built repo (what :func:`render_card` declares)."""
    from pathlib import Path
    out: dict[str, dict[str, int]] = {}
    for name, cfg in sorted(manifest["configs"].items()):
        for split, info in sorted(cfg["splits"].items()):
            out.setdefault(name, {})[split] = arrow_num_bytes(
                [Path(repo) / s["path"] for s in info["shards"]], card_features(name))
    return out


def _sample(configs: dict, hub: dict | None) -> list[str]:
    """The card's code sample: the Hub id pinned to the release tag once published, else
    the local folder."""
    config = "low_light_s3" if "low_light_s3" in configs else next(iter(sorted(configs)))
    if hub:
        return ["```python", "import datasets",
                f"ds = datasets.load_dataset(\"{hub['repo_id']}\", \"{config}\", revision=\"{hub['revision']}\")",
                "```"]
    return ["```python", "import datasets", f"ds = datasets.load_dataset(\"aegisbench\", \"{config}\")  # from the project root", "```"]


def _licenses(sources: list[dict]) -> dict:
    """The card's licence keys: one Hub id; ``other`` with the SPDX name and its page; or, with
    several licences, ``other`` naming them all and linking the Licensing section."""
    spdx = sorted({str(s.get("license") or UNKNOWN) for s in sources}) or [UNKNOWN]
    if len(spdx) > 1:
        return {"license": "other", "license_name": "mixed: " + ", ".join(spdx),
                "license_link": "#licensing-information"}
    hub, name = hub_license(spdx[0])
    return {"license": hub, **({"license_name": name, "license_link": license_url(spdx[0])} if name else {})}


def _front_matter(configs: dict, sources: list[dict], sizes: dict | None) -> dict:
    """The card's YAML metadata (what the Hub reads): licences, sizes, tasks, configs."""
    rows = sum(sp["rows"] for c in configs.values() for sp in c["splits"].values())
    tracks = sorted({s["track"] for s in sources})
    front: dict = {
        "pretty_name": "AegisBench",
        **_licenses(sources),
        "language": ["en"],
        "annotations_creators": sorted({"machine-generated" if is_synthetic(s) else "found" for s in sources}),
        "size_categories": [size_category(rows)],
        "source_datasets": sorted({"original" if is_synthetic(s) else f"extended|{s['name']}" for s in sources}),
        **_tasks(tracks),
        "tags": ["robustness", "disaster-response", "search-and-rescue", "wildfire", "benchmark"],
        "configs": [],
        "dataset_info": [],
    }
    front["configs"], front["dataset_info"] = _declared_configs(configs, sizes)
    return front


def _tasks(tracks: list[str]) -> dict:
    """The card's ``task_categories`` (the benchmark's, then those of each family whose tracks
    are built) and ``task_ids`` (each built track's, as its family declares it)."""
    found = families()
    categories = list(TASK_CATEGORIES)
    for family in found:
        if set(family.tracks) & set(tracks):
            categories += [c for c in family.task_categories if c not in categories]
    ids = {t: i for family in found for t, i in family.task_ids.items()}
    return {"task_categories": categories, "task_ids": [ids[t] for t in tracks if t in ids]}


def _field_groups(configs: dict) -> list[tuple[str, object]]:
    """(which configs, their card features) per distinct feature set, for Data Fields."""
    groups: dict[str, tuple[list[str], object]] = {}
    for name in sorted(configs, key=lambda c: (c != "clean", c)):
        features = card_features(name)
        key = repr(features)
        groups.setdefault(key, ([], features))[0].append(name)
    out = []
    for names, features in groups.values():
        title = f"`{names[0]}`" if len(names) == 1 else f"`{names[0]}` and {len(names) - 1} other configs"
        out.append((title, features))
    return out


def render_card(manifest: dict, descriptions: dict[str, str], sources: list[dict], sizes: dict | None = None,
                hub: dict | None = None) -> str:
    """The card of a repo. ``sizes``: config -> split -> Arrow ``num_bytes``
    (:func:`arrow_sizes`; without it the Parquet bytes are declared); ``hub``:
    ``{"repo_id", "revision"}`` once published (the code sample loads it from the Hub)."""
    configs = manifest["configs"]
    front = _front_matter(configs, sources, sizes)
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
        *_sample(configs, hub),
        "", "## Configs", "", "| config | splits | rows | description |", "| --- | --- | --- | --- |",
    ]
    for name in sorted(configs, key=lambda c: (c != "clean", c)):
        splits = configs[name]["splits"]
        rows = sum(s["rows"] for s in splits.values())
        lines.append(f"| `{name}` | {', '.join(f'`{s}`' for s in sorted(splits)) or 'none'} | {rows} | "
                     f"{descriptions.get(name, '')}{_skip_note(configs[name])} |")
    withheld = manifest.get("withheld_labels") or []
    lines += ["", "Splits are named after the source dataset; `<source>_val` is clean validation "
              "(used once to freeze a detector's threshold), `<source>` is the test split.", "",
              *([f"**Withheld labels**: {', '.join(f'`{s}`' for s in withheld)} carry images, ids and metadata but "
                 "no boxes (`objects` and `ignore` are empty): their labels are held by the scoring side, and "
                 "submissions are scored against them there.", ""] if withheld else []),
              *condition_notes(manifest), *source_condition_notes(manifest), *warp_notes(manifest),
              *data_fields(_field_groups(configs)), *source_data(sources), *personal_information(sources),
              *limitations(sources), *licensing(sources), *citation_section(CITATION % (version, digest), sources),
              _inputs_block({c: descriptions.get(c, "") for c in sorted(configs)}, sources, sizes, hub), ""]
    return "\n".join(lines)


_INPUTS = "<!-- aegisbench-card-inputs "
_INPUTS_RE = re.compile(r"^<!-- aegisbench-card-inputs (\{.*\}) -->$", re.MULTILINE)


def _inputs_block(descriptions: dict[str, str], sources: list[dict], sizes: dict | None = None,
                  hub: dict | None = None) -> str:
    """The hidden comment holding the card's inputs (``<`` and ``>`` escaped: it cannot end early)."""
    doc = {"descriptions": descriptions, "sources": sources}
    doc.update({k: v for k, v in (("sizes", sizes), ("hub", hub)) if v})
    body = canonical_json(doc)
    return _INPUTS + body.replace("<", "\\u003c").replace(">", "\\u003e") + " -->"


def card_inputs(text: str) -> tuple[dict, list, dict | None, dict | None] | None:
    """``(descriptions, sources, sizes, hub)`` of a card's inputs comment (the arguments of
    :func:`render_card`); None without a well-formed one."""
    found = _INPUTS_RE.findall(text)
    try:
        doc = json.loads(found[-1]) if found else None
    except ValueError:
        return None
    if not (isinstance(doc, dict) and isinstance(doc.get("descriptions"), dict)
            and isinstance(doc.get("sources"), list) and all(isinstance(s, dict) for s in doc["sources"])
            and isinstance(doc.get("sizes") or {}, dict) and isinstance(doc.get("hub") or {}, dict)):
        return None
    return doc["descriptions"], doc["sources"], doc.get("sizes"), doc.get("hub")


def card_problems(text: str, manifest: dict, exact: bool = True) -> list[str]:
    """What is wrong with a repo's card given its manifest. ``exact``: the card must be what
    :func:`render_card` renders from the manifest and the card's inputs (the manifest was
    written by this code); otherwise (another builder version) its YAML configs and split
    sizes and its digest must be the manifest's."""
    inputs = card_inputs(text)
    if inputs is None:
        return ["the card has no well-formed inputs comment (not rendered by this builder)"] if exact \
            else _declared_problems(text, manifest)
    descriptions, sources, sizes, hub = inputs
    declared = {n: (s.get("track"), s.get("kind"), s.get("modality")) for n, s in manifest.get("sources", {}).items()}
    listed = {s.get("name"): (s.get("track"), s.get("kind"), s.get("modality")) for s in sources}
    bad = [] if listed == declared else ["the card's sources (name, track, kind, modality) are not the manifest's"]
    if not exact:
        return bad + _declared_problems(text, manifest)
    try:
        same = render_card(manifest, descriptions, sources, sizes, hub) == text
    except (KeyError, TypeError, ValueError, AttributeError):
        same = False
    return bad + ([] if same else ["the card differs from the card rendered from the manifest and its inputs"])


def _declared_problems(text: str, manifest: dict) -> list[str]:
    """The parts of a card any builder version derives from the manifest alone."""
    bad = []
    head = text.split("\n---\n", 1)[0]
    try:
        front = yaml.safe_load(head[4:]) if head.startswith("---\n") else None
    except yaml.YAMLError:
        front = None
    entries, info = _declared_configs(manifest["configs"])

    def counts(items):  # split names and sizes in rows (num_bytes is the Arrow size: not in the manifest)
        return [(i.get("config_name"), [(s.get("name"), s.get("num_examples")) for s in i.get("splits") or []
                                        if isinstance(s, dict)]) for i in items if isinstance(i, dict)]
    if not isinstance(front, dict) or front.get("configs") != entries or (
            counts(front.get("dataset_info") or []) != counts(info)):
        bad.append("the card's YAML configs and split sizes are not the manifest's")
    if f"dataset digest: `{manifest['dataset_digest']}`" not in text:
        bad.append("the card does not state the manifest's dataset digest")
    return bad


def _declared_configs(configs: dict, sizes: dict | None = None) -> tuple[list[dict], list[dict]]:
    """The YAML ``configs`` and ``dataset_info`` entries; a config every source skipped (not
    physical for any of them) has no data files and is not declared. ``num_bytes`` is the
    Arrow size of ``sizes`` (else the Parquet bytes), ``download_size`` the Parquet bytes,
    ``dataset_size`` the sum of ``num_bytes``."""
    entries, info = [], []
    for name in sorted(configs, key=lambda c: (c != "clean", c)):
        splits = configs[name]["splits"]
        if not splits:
            continue
        entry = {"config_name": name,
                 "data_files": [{"split": s, "path": f"{name}/{s}-*.parquet"} for s in sorted(splits)]}
        if name == "clean":
            entry["default"] = True
        entries.append(entry)
        files = {s: sum(x["bytes"] for x in splits[s]["shards"]) for s in splits}
        arrow = {s: int(((sizes or {}).get(name) or {}).get(s, files[s])) for s in splits}
        info.append({
            "config_name": name, "features": card_features(name)._to_yaml_list(),
            "splits": [{"name": s, "num_examples": splits[s]["rows"], "num_bytes": arrow[s]} for s in sorted(splits)],
            "download_size": sum(files.values()), "dataset_size": sum(arrow.values()),
        })
    return entries, info


def corruption_model_text(name: str) -> str:
    """The physical model of a corruption in one paragraph: the registry's summary, then
    the body of its function's docstring (the card and the leaderboard's gallery show it)."""
    from aegisbench.corruptions import get_spec

    spec = get_spec(name)
    doc = inspect.getdoc(spec.fn) or ""
    body = " ".join(line.strip() for line in doc.splitlines()[1:] if line.strip())
    return " ".join(x for x in (spec.summary, body) if x)


def condition_notes(manifest: dict) -> list[str]:
    """"Conditions" section: each corruption's model (its docstring) and ladder targets."""
    from aegisbench.corruptions import get_spec

    used = sorted({c for cfg in manifest["configs"].values() for c in _corruptions_of(cfg.get("meta", {}))})
    if not used:
        return []
    out = ["## Conditions", "",
           "Each corruption is one physical model; its three severities hit declared targets "
           "of one image statistic on the calibration sample (`aegisbench calibrate`).", ""]
    for name in used:
        spec = get_spec(name)
        targets = " / ".join(f"{t:g}" for t in spec.targets)
        text = corruption_model_text(name)
        out.append(f"- `{name}` ({spec.family}): {text} Ladder: `{spec.statistic}` "
                   f"targets {targets} (s1 / s2 / s3), parameter `{spec.fit_param}`. "
                   f"Sensors: {', '.join(spec.modalities)} ({spec.modality_note.rstrip('.')}).")
    return [*out, ""]


def not_physical_text(modality: str) -> str:
    """The cell text of a condition not built for a source: ``n/a (not physical for thermal)``."""
    return f"n/a (not physical for {modality})"


def _skip_note(cfg: dict) -> str:
    skipped = cfg.get("not_physical") or {}
    return "".join(f" `{src}`: {not_physical_text(m)}." for src, m in sorted(skipped.items()))


def source_condition_notes(manifest: dict) -> list[str]:
    """"Sources and conditions" section: test rows of every (config, detection source), or
    why there are none ("n/a (not physical for thermal)"; "-": not a config of its track)."""
    srcs = sorted(n for n, s in manifest.get("sources", {}).items() if s.get("track") in DETECTION_TRACKS)
    cfgs = [c for c in sorted(manifest["configs"], key=lambda c: (c != CLEAN, c))
            if manifest["configs"][c].get("meta", {}).get("kind") in (CLEAN, CORRUPTION, COMPOUND, WARP_NOISE)]
    if not srcs or not cfgs:
        return []
    mods = {n: manifest["sources"][n].get("modality") or "rgb" for n in srcs}
    out = ["## Sources and conditions", "",
           "Test images per source and condition. A condition whose physics does not hold for a source's "
           "sensor (see each corruption's `Sensors` above) is not built for it.", "",
           "| config | " + " | ".join(f"`{n}` ({mods[n]})" for n in srcs) + " |",
           "| --- |" + " --- |" * len(srcs)]
    for c in cfgs:
        cfg = manifest["configs"][c]
        skipped, splits = cfg.get("not_physical") or {}, cfg["splits"]
        cells = [not_physical_text(skipped[n]) if n in skipped else str(splits[n]["rows"]) if n in splits else "-"
                 for n in srcs]
        out.append(f"| `{c}` | " + " | ".join(cells) + " |")
    return [*out, ""]


def _corruptions_of(meta: dict) -> list[str]:
    if meta.get("kind") == CORRUPTION:
        return [meta["corruption"]]
    if meta.get("kind") == COMPOUND:
        return [parse_corruption_config(c)[0] for c in meta.get("components", [])]
    return []
