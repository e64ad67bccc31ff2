"""The same reference weights and detections on every x86-64 machine (issue 36, item 2).

A fresh clone on an Intel Xeon rebuilt the committed dataset digest and then changed most
reference rows of an AMD EPYC's outputs. Two CPUs cannot meet in one test, so each child
process here plays a machine: oneDNN capped at SSE4.1 instead of AVX2 (another CPU's
kernels and blocking) and a different default thread count. The reference trainer and
``detect`` run in :func:`aegisbench.kernels.portable` (oneDNN off, fixed threads, MKL's
``COMPATIBLE`` branch pinned by :mod:`aegisbench.isa`): both machines give the same weights
file, ``train.json`` and detections, and no oneDNN primitive runs. The same two machines
with oneDNN on (``reference_detector.onednn``) give two different weights files: the
test can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from aegisbench import isa, kernels
from aegisbench.cli import main
from aegisbench.detectors.interface import DetectorOptions
from aegisbench.detectors.reference import ReferenceParams
from aegisbench.errors import BadInput
from _detkit import TINY_YOLO, trained_checkpoint
from _evalkit import materialize, tiny_params

TINY = {"synthetic_sar": {"n_train": 3, "n_val": 2, "n_test": 2, "images_per_flight": 1, "large_fraction": 0.0},
        "synthetic_smoke": {"n_train": 1, "n_val": 1, "n_test": 1}}
#: two machines this CPU can play: its own (pinned) kernels, and oneDNN at SSE4.1 with another
#: default thread count (each variable only read by the library when it loads)
MACHINES = {"pinned": {}, "sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41", "OMP_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}}

_CHILD = r'''
import hashlib, json, os, sys
import aegisbench
aegisbench.pin_isa()
emulate, source, out, onednn, gemm = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "on", sys.argv[5]
pinned = {k: os.environ[k] for k in emulate if k in os.environ}
os.environ.update(emulate)
import numpy as np, torch
# oneDNN reads its instruction-set cap at its first primitive: run one as this "machine"
# (it prints the CPU it sees), then give the pins back (the trainer checks them)
with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
    torch.nn.functional.conv2d(torch.ones(2, 8, 16, 16), torch.ones(8, 8, 3, 3))
os.environ.update(pinned)
print("MACHINE READY", flush=True)
from aegisbench.builders.source_table import read_source_table
from aegisbench.detectors.interface import DetectorOptions, load_detector
from aegisbench.detectors.reference import ReferenceParams, train_reference
from aegisbench.forecasters.convlstm import ConvLSTMConfig, predict_convlstm, train_convlstm
p = ReferenceParams(epochs=2, max_images=3, crop=96, imgsz=96, batch=4, close_mosaic=1, warmup_epochs=0,
                    onednn=onednn, gemm=gemm)
result = {}
# from here every oneDNN primitive that runs prints a line (none may, with oneDNN off)
with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_OFF if onednn else torch.backends.mkldnn.VERBOSE_ON):
    report = train_reference(source, out, p, score=False)
    result.update(weights=report["weights_sha256"], kernels=report["kernels"])
    if not onednn:
        det = load_detector("yolo", os.path.join(out, "weights.pt"), DetectorOptions(gemm=gemm))
        frames = [r.image() for r in read_source_table(source, ["val", "test"])]
        h = hashlib.sha256()
        for batch in (frames[:1], frames):
            for d in det.predict(batch):
                h.update(d.xyxy.tobytes()); h.update(d.score.tobytes())
        rng = np.random.default_rng(3)
        tau = rng.integers(0, 12, (4, 16, 16)).astype(np.float32)
        tree = (rng.random((16, 16)) < 0.7).astype(np.float32)
        net = train_convlstm({50: {0: (tau, tree)}}, 3, ConvLSTMConfig(steps=6, hidden=4, batch=3, train_horizon=6,
                                                                       device="cpu", gemm=gemm))
        maps = predict_convlstm(net, np.stack([tree] * 3), (tau[:3, None] <= np.arange(3)[:, None, None]), 0.5, 4)
        w = b"".join(v.numpy().tobytes() for v in net.state_dict().values())
        result.update(detect=h.hexdigest(), detect_kernels=det.kernels(),
                      convlstm=hashlib.sha256(w + maps.tobytes()).hexdigest())
print("RESULT " + json.dumps(result), flush=True)
'''


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels")
    materialize(tiny_params(root, TINY, ["low_light_s3"]))
    return root / "sources" / "synthetic_sar.parquet"


def _as_machine(name: str, source: Path, out: Path, onednn: bool, gemm: str = "mkl") -> tuple[dict, str]:
    """Train (and with oneDNN off detect and roll out the ConvLSTM) in a child playing ``name``,
    the convolutions' products on ``gemm``; returns its result and what it printed after the
    machine was set up."""
    args = [sys.executable, "-c", _CHILD, json.dumps(MACHINES[name]), str(source), str(out), "on" if onednn else "off",
            gemm]
    run = subprocess.run(args, capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-3000:]
    head, _, tail = run.stdout.partition("MACHINE READY")
    line = next(x for x in tail.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), head + "\n--- after setup ---\n" + tail


def _cpu_seen(printed: str) -> str:
    return next(x.split("isa:")[1] for x in printed.splitlines() if ",info,cpu,isa:" in x)


#: the machines are played on an x86-64-v3 CPU with a torch that has oneDNN
PLAYABLE = pytest.mark.skipif(isa.profile() != isa.PROFILE or not torch.backends.mkldnn.is_available(),
                              reason="plays x86-64-v3 machines through torch's oneDNN")


@PLAYABLE
def test_two_machines_train_and_detect_the_same_bytes_with_onednn_off(source, tmp_path):
    a, printed_a = _as_machine("pinned", source, tmp_path / "a" / "ref", onednn=False)
    b, printed_b = _as_machine("sse41", source, tmp_path / "b" / "ref", onednn=False)
    # the two children really ran different oneDNN kernels (this CPU's capped at AVX2, and SSE4.1)
    assert _cpu_seen(printed_b) == "Intel SSE4.1" != _cpu_seen(printed_a)
    assert a == b  # weights, detections, the ConvLSTM's weights and forecasts, the recorded kernels
    assert (tmp_path / "a" / "ref" / "train.json").read_bytes() == (tmp_path / "b" / "ref" / "train.json").read_bytes()
    assert os.environ["MKL_CBWR"] == "COMPATIBLE"  # the pin (aegisbench.isa)
    want = f"x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread, torch {torch.__version__}"
    assert a["kernels"] == a["detect_kernels"] == want  # what each result records
    # no oneDNN primitive ran in training, detection or the ConvLSTM (its blocking follows the caches)
    for printed in (printed_a, printed_b):
        assert not [x for x in printed.split("--- after setup ---")[1].splitlines() if ",primitive,exec," in x]


@PLAYABLE
def test_two_machines_train_and_detect_the_same_bytes_with_convolutions_on_openblas(source, tmp_path):
    """``gemm: openblas``: the convolutions' products on NumPy's OpenBLAS (Haswell kernels pinned by
    aegisbench.isa, one BLAS thread whatever the machine's default): the two machines give the same
    weights, train.json, detections and ConvLSTM weights and forecasts, which are not torch's own
    path's (so OpenBLAS ran), and every record says which BLAS ran the convolutions."""
    a, printed_a = _as_machine("pinned", source, tmp_path / "a" / "ref", onednn=False, gemm="openblas")
    b, _ = _as_machine("sse41", source, tmp_path / "b" / "ref", onednn=False, gemm="openblas")
    assert a == b
    assert (tmp_path / "a" / "ref" / "train.json").read_bytes() == (tmp_path / "b" / "ref" / "train.json").read_bytes()
    mkl, _ = _as_machine("pinned", source, tmp_path / "m" / "ref", onednn=False)
    assert a["weights"] != mkl["weights"] and a["detect"] != mkl["detect"] and a["convlstm"] != mkl["convlstm"]
    assert a["kernels"] == a["detect_kernels"] == kernels.describe(1, gemm="openblas")
    assert a["kernels"].startswith(mkl["kernels"] + ", conv OpenBLAS ") and a["kernels"].endswith(" Haswell")
    assert not [x for x in printed_a.split("--- after setup ---")[1].splitlines() if ",primitive,exec," in x]


@PLAYABLE
def test_with_onednn_on_the_same_two_machines_train_different_weights(source, tmp_path):
    """The counterexample: only ``onednn: true`` changed, and the weights follow the CPU."""
    a, _ = _as_machine("pinned", source, tmp_path / "a" / "ref", onednn=True)
    b, _ = _as_machine("sse41", source, tmp_path / "b" / "ref", onednn=True)
    assert a["weights"] != b["weights"]
    assert a["kernels"] == b["kernels"] and ", oneDNN on, " in a["kernels"]  # the record says what ran


def _mkl_branch(env: dict) -> str:
    code = "import sys\nif sys.argv[1] == 'pin':\n    import aegisbench; aegisbench.pin_isa()\n" \
           "import torch\ntorch.ones(64, 64) @ torch.ones(64, 64)\n"
    lines = []
    for how in ("pin", "as is"):
        out = subprocess.run([sys.executable, "-c", code, how], env={**env, "MKL_VERBOSE": "1"},
                             capture_output=True, text=True, timeout=300).stdout
        lines.append(next(w for w in out.split() if w.startswith("CNR:")))
    return " ".join(lines)


@pytest.mark.skipif(isa.profile() != isa.PROFILE or not torch.backends.mkl.is_available(),
                    reason="MKL's branches are pinned on x86-64-v3 builds with MKL")
def test_mkl_runs_its_compatible_branch_and_avx2_would_not_pin_an_amd_cpu():
    env = {k: v for k, v in os.environ.items() if k not in isa.ENV}
    pinned, asked_avx2 = _mkl_branch({**env, "MKL_CBWR": "AVX2"}).split()
    assert pinned == "CNR:COMPATIBLE"  # the command's pin (aegisbench.isa)
    vendor = "AMD" if "AuthenticAMD" in Path("/proc/cpuinfo").read_text() else "Intel"
    # the 0.5 pin: Intel runs its AVX2 branch, an AMD CPU its own AUTO one (different arithmetic)
    assert asked_avx2 == {"AMD": "CNR:AUTO", "Intel": "CNR:AVX2"}[vendor]


def test_each_row_says_the_kernels_it_was_computed_on(repo, tmp_path):
    """``detect`` records the machine class in submission.yaml; ``evaluate`` carries it into
    the results' provenance, where the leaderboard reads a row's."""
    weights = trained_checkpoint(TINY_YOLO, tmp_path / "tiny.pt")
    out = tmp_path / "subs" / "tiny"
    assert main(["detect", "--detector", "yolo", "--weights", str(weights), "--dataset", str(repo), "--track", "sar",
                 "--out", str(out), "--team", "t", "--conf", "0", "--batch", "4", "--no-progress"]) == 0
    said = kernels.describe(1)
    assert yaml.safe_load((out / "submission.yaml").read_text())["detector"]["kernels"] == said
    assert main(["evaluate", str(out), "--dataset", str(repo), "--out", str(tmp_path / "results"),
                 "--n-resamples", "10"]) == 0
    (prov,) = [json.loads(p.read_text()) for p in (tmp_path / "results").rglob("provenance.json")]
    assert prov["kernels"] == said and ", oneDNN off, " in said


@pytest.mark.skipif(isa.profile() != isa.PROFILE, reason="the pins hold on an x86-64-v3 CPU")
def test_the_leaderboard_calls_every_pinned_cpu_class_portable():
    """What ``describe`` writes on the pinned path, on either BLAS of the convolutions, is what the
    leaderboard's verdict calls portable (0.9.0's page called the OpenBLAS class "not a machine class
    this project writes"); with oneDNN on it is machine-dependent."""
    from aegisbench.leaderboard.machine import MACHINE_DEPENDENT, PORTABLE, portability

    for threads, gemm in ((1, "mkl"), (1, "openblas"), (2, "openblas")):
        assert portability(kernels.describe(threads, gemm=gemm)) == (PORTABLE, None), (threads, gemm)
    assert portability(kernels.describe(1, onednn=True)) == (MACHINE_DEPENDENT, "oneDNN on")


def test_portable_restores_the_callers_settings_and_refuses_bad_threads():
    def now():
        return torch.get_num_threads(), torch.backends.mkldnn.enabled, torch._C._get_nnpack_enabled()

    before = now()
    with kernels.portable(3) as said:
        assert now() == (3, False, False)
        assert said == f"{isa.profile()}, oneDNN off, MKL {os.environ.get('MKL_CBWR') or 'unpinned'}, 3 threads, " \
                       f"torch {torch.__version__}"
    assert now() == before
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="threads"), kernels.portable(bad):
            pass
    assert kernels.describe(2, device="cuda:1") == f"cuda:1, torch {torch.__version__}"


def test_bad_kernel_settings_are_refused():
    with pytest.raises(BadInput, match="threads"):
        DetectorOptions(threads=0)
    with pytest.raises(ValueError, match="onednn"):
        DetectorOptions(onednn="no")
    with pytest.raises(BadInput, match="reference_detector.onednn: must be true or false"):
        ReferenceParams.from_dict({"onednn": "yes"})
    assert DetectorOptions(onednn=True, threads=2).threads == 2
    with pytest.raises(BadInput, match="--gemm"):
        DetectorOptions(gemm="blas")
    with pytest.raises(BadInput, match="--gemm"):
        DetectorOptions(gemm="openblas", onednn=True)
    with pytest.raises(BadInput, match="reference_detector.gemm"):
        ReferenceParams.from_dict({"gemm": "atlas"})
    with pytest.raises(BadInput, match="reference_detector.gemm"):
        ReferenceParams.from_dict({"gemm": "openblas", "onednn": True})
    with pytest.raises(ValueError, match="oneDNN"), kernels.portable(1, onednn=True, gemm="openblas"):
        pass
    with pytest.raises(ValueError, match="gemm"), kernels.portable(1, gemm="MKL"):
        pass


def test_detect_takes_threads_and_onednn_from_the_command_line(tmp_path, capsys):
    """``detect --threads N --onednn`` reach DetectorOptions (the kernels every row records); a thread
    count below 1 is one line naming --threads, exit 2, nothing written."""
    from aegisbench.cli import build_parser, main
    from aegisbench.detectors.commands import _options

    args = build_parser().parse_args(["detect", "--detector", "yolo", "--weights", "w.pt", "--track", "sar",
                                      "--out", str(tmp_path / "s"), "--threads", "2", "--onednn"])
    opts = _options(args)
    assert (opts.threads, opts.onednn, opts.gemm) == (2, True, "mkl")
    args = build_parser().parse_args(["detect", "--detector", "yolo", "--weights", "w.pt", "--track", "sar",
                                      "--out", str(tmp_path / "s"), "--gemm", "openblas"])
    assert _options(args).gemm == "openblas"
    assert main(["detect", "--detector", "yolo", "--weights", str(tmp_path / "w.pt"), "--track", "sar", "--team", "t",
                 "--dataset", str(tmp_path / "none"), "--out", str(tmp_path / "s"), "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert "--threads" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_detect_gemm_trained_reads_the_recipe_beside_the_weights(tmp_path, capsys):
    """``detect --gemm trained`` takes the convolutions' BLAS from the train.json beside --weights
    (``mkl`` for a report from before the choice); a report without one, or with an unknown one, is
    one line naming --gemm, exit 2, nothing written."""
    from aegisbench.cli import build_parser, main
    from aegisbench.detectors.commands import _options

    weights = tmp_path / "w.pt"

    def parsed(report: dict | None) -> str:
        if report is not None:
            (tmp_path / "train.json").write_text(json.dumps(report))
        args = build_parser().parse_args(["detect", "--detector", "yolo", "--weights", str(weights), "--track", "sar",
                                          "--out", str(tmp_path / "s"), "--gemm", "trained"])
        return _options(args).gemm

    assert parsed({"params": {"gemm": "openblas"}}) == "openblas"
    assert parsed({"params": {"epochs": 3}}) == "mkl"
    with pytest.raises(BadInput, match="params.gemm"):
        parsed({"params": {"gemm": "atlas"}})
    (tmp_path / "train.json").unlink()
    assert main(["detect", "--detector", "yolo", "--weights", str(weights), "--track", "sar", "--team", "t",
                 "--dataset", str(tmp_path / "none"), "--out", str(tmp_path / "s"), "--gemm", "trained"]) == 2
    err = capsys.readouterr().err
    assert "--gemm" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "s").exists()
