"""The rows of a dataset repo, declared once: the features of every config kind and the content
key a row's hash covers.

A config holds rows of one *kind*: ``image`` (a frame with its boxes: every condition config),
``realizations`` or ``statistic`` (fire-spread ensembles). :data:`KIND_FEATURES` declares each
kind's Hugging Face features; :func:`features_schema` is the Arrow schema a shard of that kind is
written with (with the metadata ``datasets`` reads back). Which kind a config holds is asked of
its family (:func:`aegisbench.dataset.families.config_kind`), never parsed here.

>>> sorted(KIND_FEATURES), SCHEMA.field("sha256").type
(['image', 'realizations', 'statistic'], DataType(string))
>>> [f.name for f in LABEL_SCHEMA]
['image_id', 'objects', 'ignore']
"""

from __future__ import annotations

import json

import datasets
import pyarrow as pa


def features_schema(features: datasets.Features) -> pa.Schema:
    """Arrow schema of HF ``features`` with the metadata ``datasets`` reads back."""
    return features.arrow_schema.with_metadata(
        {"huggingface": json.dumps({"info": {"features": features.to_dict()}}, sort_keys=True)})


FEATURES = datasets.Features(
    {
        "image": datasets.Image(),
        "image_id": datasets.Value("string"),
        "source": datasets.Value("string"),
        "condition": datasets.Value("string"),
        "width": datasets.Value("int32"),
        "height": datasets.Value("int32"),
        "objects": {
            "bbox": datasets.List(datasets.List(datasets.Value("float32"), length=4)),
            "label": datasets.List(datasets.Value("string")),
        },
        "group_id": datasets.Value("string"),
        "frame_index": datasets.Value("int32"),
        "time_s": datasets.Value("float64"),
        "fire_start_frame": datasets.Value("int32"),
        "sha256": datasets.Value("string"),
        "ignore": datasets.List(datasets.List(datasets.Value("float32"), length=4)),
        "meta": datasets.List({"name": datasets.Value("string"), "value": datasets.Value("string")}),
    }
)
#: the Arrow schema of an image shard
SCHEMA = features_schema(FEATURES)
#: the rows of a private label repo's split (:mod:`aegisbench.dataset.labels`)
LABEL_SCHEMA = pa.schema([SCHEMA.field("image_id"), SCHEMA.field("objects"), SCHEMA.field("ignore")])


def content_key(row: dict) -> list:
    """The parts of an image row that define its content (encoder-independent)."""
    o = row["objects"]
    return [row["image_id"], row["sha256"], row["width"], row["height"], o["bbox"], o["label"],
            row["group_id"], row["frame_index"], row["time_s"], row["fire_start_frame"], row["ignore"],
            [[m["name"], m["value"]] for m in row["meta"]]]


_I32, _I16 = datasets.Value("int32"), datasets.Value("int16")
_COMMON = {
    "initial_condition": _I32,
    "s_level": _I32,
    "p_ignite": datasets.Value("float64"),
    "height": _I32,
    "width": _I32,
    "n_trees": _I32,
    "tree": datasets.List(datasets.List(datasets.Value("bool"))),
    "seeds": datasets.List(datasets.List(_I32, length=2)),
}
#: the fire-spread kinds: one row per (initial condition, realization), or per (initial condition, S-level)
FIRESPREAD_FEATURES: dict[str, datasets.Features] = {
    "realizations": datasets.Features({
        **_COMMON,
        "realization": _I32,
        "ignition_time": datasets.List(datasets.List(_I16)),
        "n_steps": _I32,
        "truncated": datasets.Value("bool"),
        "burnt_cells": _I32,
    }),
    "statistic": datasets.Features({
        **_COMMON,
        "n_realizations": _I32,          # realizations counted: held_out_realizations .. realizations-1
        "held_out_realizations": _I32,   # realizations 0..n-1: scored, never in the statistic
        "n_frames": _I32,
        "burn_counts": datasets.List(datasets.List(datasets.List(_I32))),
        "z_mean": datasets.List(datasets.Value("float64")),
        "z_var": datasets.List(datasets.Value("float64")),
        "max_steps_reached": _I32,
        "truncated_realizations": _I32,
        "forecast_observe": _I32,
        "forecast_horizon": _I32,
        "forecast_threshold": datasets.Value("float64"),
        "eval_realizations": _I32,
        "ece_bins": _I32,
    }),
}
#: config kind -> the features of its rows
KIND_FEATURES: dict[str, datasets.Features] = {"image": FEATURES, **FIRESPREAD_FEATURES}
