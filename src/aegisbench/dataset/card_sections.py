"""The prose sections of the dataset card that follow the Hugging Face dataset-card template:
Dataset Structure (Data Fields), Source Data, Personal and Sensitive Information, Bias, Risks and
Limitations, Licensing Information and Citation Information. Every value a source brings
(licence, homepage, description, citation) is rendered inert (:mod:`card_text`).

>>> feature_type(datasets.List(datasets.List(datasets.Value("float32"), length=4)))
'list[list[float32; 4]]'
"""

from __future__ import annotations

import re

import datasets

from aegisbench.attribution import UNKNOWN, license_url
from aegisbench.dataset.card_text import card_citations, card_text
from aegisbench.vocab import SMOKE

#: what each field of a config's rows holds (the card's Data Fields); a contract test checks
#: that every declared feature has an entry
FIELD_DOCS = {
    "image": "the frame, PNG (corrupted configs: the corrupted frame, same size as the clean one)",
    "image_id": "the source's image id (file stem or path inside the source folder)",
    "source": "the source the row comes from (see Source Data)",
    "condition": "the config's condition: `clean`, `<corruption>_s<k>` or a compound",
    "width": "frame width in pixels", "height": "frame height in pixels (fire spread: grid rows)",
    "objects": "the boxes: `bbox` as `[x1, y1, x2, y2]` in full-frame pixels, `label` the track's class",
    "group_id": "images of one video, flight or scene share it (never split across splits)",
    "frame_index": "frame number inside its group (-1 when the source has no order)",
    "time_s": "capture time inside the sequence in seconds (smoke sequences; else NaN)",
    "fire_start_frame": "smoke sequences: the first frame with smoke (-1: none or unknown)",
    "sha256": "SHA-256 of the stored image bytes",
    "ignore": "ignore regions `[x1, y1, x2, y2]`: detections inside them are neither true nor false positives",
    "meta": "per-image capture conditions as `{name, value}` pairs (e.g. altitude, time of day)",
    "initial_condition": "index of the initial condition (forest layout and seeds)",
    "s_level": "S-Level = (1 - p_ignite) x 100, the stochasticity of the spread",
    "p_ignite": "ignition probability per trial", "n_trees": "trees in the forest layout",
    "tree": "forest layout: True where a cell holds fuel", "seeds": "ignition cells `[row, col]`",
    "realization": "Monte Carlo realization number of the ensemble",
    "ignition_time": "tick at which each cell ignited (-1: never)", "n_steps": "ticks until the fire died out",
    "truncated": "the run hit max_steps before the fire died out", "burnt_cells": "cells burnt at the end",
    "n_realizations": "realizations in the statistic", "held_out_realizations": "realizations kept out of "
    "the statistic (scored as observations)", "n_frames": "frames of the burn counts",
    "burn_counts": "per frame and cell, realizations burnt by then (the statistic's numerator)",
    "z_mean": "mean burnt fraction per frame", "z_var": "variance of the burnt fraction per frame",
    "max_steps_reached": "longest run in ticks", "truncated_realizations": "runs cut at max_steps",
    "forecast_observe": "frames a forecaster observes", "forecast_horizon": "frames it forecasts",
    "forecast_threshold": "burnt iff probability > threshold", "eval_realizations": "realizations scored",
    "ece_bins": "bins of the expected calibration error",
}


def feature_type(feature) -> str:
    """A feature's type in one short word (``int32``, ``image``, ``list[float32; 4]``, ``{bbox, label}``)."""
    if isinstance(feature, datasets.Value):
        return feature.dtype
    if isinstance(feature, datasets.Image):
        return "image"
    if isinstance(feature, datasets.ClassLabel):
        return f"class label ({', '.join(feature.names)})"
    if isinstance(feature, datasets.List):
        inner = feature_type(feature.feature)
        return f"list[{inner}; {feature.length}]" if feature.length and feature.length > 0 else f"list[{inner}]"
    if isinstance(feature, dict):
        return "{" + ", ".join(f"{k}: {feature_type(v)}" for k, v in feature.items()) + "}"
    return type(feature).__name__


def data_fields(groups: list[tuple[str, object]]) -> list[str]:
    """"Dataset Structure" with one Data Fields table per kind of row: ``groups`` is
    ``[(which configs, features)]``."""
    out = ["## Dataset Structure", "",
           "Each config is its own set of Parquet shards; one row is one frame (detection tracks) or one "
           "ensemble member / statistic (fire spread). Splits are listed under Configs.", "", "### Data Fields", ""]
    for title, features in groups:
        out += [f"Rows of {title}:", "", "| field | type | meaning |", "| --- | --- | --- |"]
        out += [f"| `{k}` | {card_text(feature_type(v), 200)} | {FIELD_DOCS.get(k, '')} |" for k, v in features.items()]
        out.append("")
    return out


def is_synthetic(source: dict) -> bool:
    """A source the package generates (synthetic scenes, the fire-spread simulator), not found data."""
    return str(source.get("kind", "")).startswith(("synthetic", "firespread"))


def _license_cell(source: dict) -> str:
    lic = str(source.get("license") or UNKNOWN)
    url = license_url(lic) if re.fullmatch(r"[A-Za-z0-9.+-]+", lic) else ""
    return f"[{card_text(lic, 80)}]({url})" if url else card_text(lic, 80)


def _homepage_cell(source: dict) -> str:
    url = str(source.get("homepage") or "")
    return f"<{url}>" if re.fullmatch(r"https?://[^\s<>()\[\]`|]+", url) else "-"


def source_data(sources: list[dict]) -> list[str]:
    """"Source Data": one row per source (track, kind, sensor, licence, homepage, description)."""
    out = ["## Source Data", "", "| source | track | kind | modality | license | homepage | description |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in sources:
        out.append(f"| `{s['name']}` | {s['track']} | {s['kind']} | "
                   f"{s.get('modality') or '-'} | {_license_cell(s)} | {_homepage_cell(s)} | "
                   f"{card_text(s.get('description') or '')} |")
    return [*out, "", "Corrupted configs are derived from each source's clean test and validation frames by "
            "the corruption models under Conditions; no frame is added that the source did not hold.", ""]


def personal_information(sources: list[dict]) -> list[str]:
    """"Personal and Sensitive Information": what the frames may show of people, per kind of source."""
    real = [s["name"] for s in sources if not is_synthetic(s)]
    out = ["## Personal and Sensitive Information", ""]
    if real:
        out.append(f"Frames of {', '.join(f'`{n}`' for n in real)} are real aerial or camera "
                   "images and may show people (search-and-rescue sources exist to find them), vehicles and "
                   "property, seen from above at a resolution where faces are rarely recognisable. AegisBench "
                   "adds no names, identities or locations beyond what the source published; use the frames "
                   "only under the source's licence and for the purpose its authors state.")
    if len(real) < len(sources):
        out.append(("" if not real else "\n") + "The embedded sources are procedurally generated: their "
                   "'people' are drawn figures, not persons, and no frame shows a real place.")
    return [*out, ""]


def limitations(sources: list[dict]) -> list[str]:
    """"Bias, Risks, and Limitations": what the benchmark does not measure."""
    out = ["## Bias, Risks, and Limitations", "",
           "- Corruptions are physical models calibrated to image statistics (targets under Conditions), not "
           "recordings of real floods, smoke or night flights: a score under `low_light_s3` is a score under "
           "that model of low light.",
           "- A condition whose physics does not hold for a source's sensor (e.g. sun glint on a thermal "
           "camera) is not built for it: that source has no row there, never a zero.",
           "- Scores come with bootstrap intervals over images; small test splits give wide intervals, and "
           "two models whose intervals overlap are not ranked apart.",
           "- Detection is scored against the source's own boxes: missed or loose annotations of the source "
           "stay in every condition."]
    if any(is_synthetic(s) for s in sources):
        out.append("- The embedded synthetic sources are a self-contained default for running the pipeline "
                   "without data; their frames are simpler than real ones and scores on them do not transfer "
                   "to real imagery.")
    return [*out, ""]


def licensing(sources: list[dict]) -> list[str]:
    """"Licensing Information": each source's licence (the rows derived from it inherit it)."""
    out = ["## Licensing Information", "",
           "Each config's rows carry the licence of the source they come from (column `source`); corrupted "
           "frames are derivatives of the source frames under the same licence.", ""]
    out += [f"- `{s['name']}`: {_license_cell(s)}" for s in sources]
    return [*out, ""]


def citation_section(benchmark: str, sources: list[dict]) -> list[str]:
    """"Citation Information": the benchmark's BibTeX and every source's, in one fenced block none
    of them can close."""
    cites = card_citations(sources)
    fence = "`" * max(3, 1 + max((len(m) for c in cites for m in re.findall(r"`+", c)), default=0))
    return ["## Citation Information", "", "If you use this dataset, cite the benchmark and every source "
            "whose configs you use:", "", f"{fence}bibtex", benchmark, *cites, fence, ""]


WARP_NOTE = (
    "## WARP (seed 000)", "",
    "- Not stored here: `aegisbench warp-detect` runs both tests of seed 000 on the clean test "
    "frames of the smoke sources and adds its rows to the submission. Global noise "
    "`x' = (1 - a) x + a sigma r`, `r ~ N(0, 1)`, as seed 000 defines it: on the tensor the "
    "model sees, after its letterbox/resize, with sigma of that tensor "
    "(`aegisbench.detectors.interface.warp_input_noise`), at every level `a` of "
    "`warp.noise_levels` over every frame (`warp_noise.parquet`); the mAP50-95 loss L(a) is "
    "scored with a bootstrap interval.",
    "- Local deception: an opaque procedural cumulus cloud filling its 25 x 25 px patch "
    "(25 px per 640 px of the longer side) is pasted at the centre of each cell of a 25 x 25 "
    "grid (625 variants per smoke-positive clean test image, `warp_patch.parquet`); a box "
    "drawn tight around the visible cloud has IoU >= 0.8 with the patch box, so a detection of "
    "the cloud counts as deceived.", "",
)


def warp_notes(manifest: dict) -> list[str]:
    """"WARP" section when the repo has a smoke source (the tests run on its clean frames)."""
    return list(WARP_NOTE) if any(s.get("track") == SMOKE for s in manifest.get("sources", {}).values()) else []
