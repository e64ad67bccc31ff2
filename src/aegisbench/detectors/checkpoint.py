"""Portable, byte-reproducible Ultralytics checkpoints.

A checkpoint as Ultralytics' trainer saves it varies between two runs of the same
recipe: it records the wall-clock date, the git state, per-epoch timings, the optimizer
state and absolute paths of the work folder and of the model YAML (in ``train_args``, in
the pickled model's own ``args`` and in its ``yaml["yaml_file"]``). ``portable_checkpoint``
keeps what inference and the "was it trained?" check need — the EMA weights, the epoch, the training arguments with
paths reduced to their last component — and drops the rest, so the same recipe on the
same data gives the same bytes wherever and whenever it runs.

>>> _path_free({"data": "/tmp/w/dataset/data.yaml", "epochs": 3, "project": "/tmp/w"})
{'data': 'data.yaml', 'epochs': 3, 'project': None}
"""

from __future__ import annotations

import copy
import io
from pathlib import Path

from aegisbench.atomic import atomic_path

#: checkpoint keys kept (everything else — date, git, train_results, train_metrics,
#: optimizer, scaler — differs between runs of one recipe or is not needed to predict)
KEPT_KEYS = ("epoch", "best_fitness", "model", "ema", "updates", "train_args", "version", "license", "docs")
#: training arguments that name files of the machine that trained (kept as a bare name)
PATH_ARGS = ("data", "model", "cfg", "tracker", "source")
#: training arguments that name the trainer's work folder (dropped)
WORK_ARGS = ("project", "save_dir")


def _path_free(args: dict) -> dict:
    out = dict(args)
    for key in PATH_ARGS:
        value = out.get(key)
        if isinstance(value, (str, Path)) and value:
            out[key] = Path(value).name
    for key in WORK_ARGS:
        if key in out:
            out[key] = None
    return out


def _strip_module(net):
    """A copy of the pickled model whose ``args`` carry no machine paths."""
    if net is None:
        return None
    net = copy.deepcopy(net)
    args = getattr(net, "args", None)
    if isinstance(args, dict):
        net.args = _path_free(args)
    elif args is not None and hasattr(args, "__dict__"):
        net.args = _path_free(vars(args))
    for attr in ("pt_path", "ckpt_path"):
        if hasattr(net, attr):
            delattr(net, attr)
    spec = getattr(net, "yaml", None)  # Ultralytics records the model YAML's absolute path here
    if isinstance(spec, dict) and isinstance(spec.get("yaml_file"), (str, Path)):
        net.yaml = {**spec, "yaml_file": Path(spec["yaml_file"]).name}
    if isinstance(getattr(net, "yaml_file", None), (str, Path)):
        net.yaml_file = Path(net.yaml_file).name
    return net


def portable_checkpoint(src: str | Path, dest: str | Path) -> dict:
    """Rewrite the trainer's checkpoint ``src`` as ``dest`` (atomically); returns it."""
    import torch

    # our own trainer just wrote ``src``: a trusted file, loaded in full to rewrite it
    ckpt = torch.load(src, map_location="cpu", weights_only=False)
    out = {key: ckpt[key] for key in KEPT_KEYS if key in ckpt}
    out["train_args"] = _path_free(dict(ckpt.get("train_args") or {}))
    for key in ("model", "ema"):
        if key in out:
            out[key] = _strip_module(out[key])
    buf = io.BytesIO()  # saved to memory: torch names the archive's records after a file's name
    torch.save(out, buf)
    with atomic_path(dest) as tmp:
        Path(tmp).write_bytes(buf.getvalue())
    return out
