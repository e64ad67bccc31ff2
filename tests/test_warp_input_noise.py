"""WARP global noise at the model input (seed 000, issue 13 point 2; issue 34 item 3).

Wrapped detectors add ``x' = (1 - a) x + a sigma r`` to the tensor the network actually
receives (captured here with a forward pre-hook), so the noise SD reaching the model is
``a * sigma(model input)`` at every input size, while noise added to the full frame
(``warp_noise`` on the stored pixels) loses part of it to the detector's resize. The
noise sweep of ``aegisbench warp-detect`` predicts every level from the clean frames
plus that input noise, deterministically, locally and on the worker/Ray job path alike,
and reuses the levels a previous run finished.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from aegisbench.builders.build import build_repo
from aegisbench.builders.sources import materialize_source
from aegisbench.dataset.images import decode_image
from aegisbench.corruptions import warp_noise
from aegisbench.detectors.interface import (WARP_INPUT, Detector, DetectorOptions, InputNoise, add_input_noise,
                                            load_detector, warp_input_noise)
from aegisbench.detectors.loader import input_noise, input_shards
from aegisbench.detectors.noise_sweep import run_noise_sweep
from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect, run_key
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for
from aegisbench.params import Params
from aegisbench.predictions import Detections

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
A = 0.2
WARP = "warp_noise_200"
TINY_YOLO = str(ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A smoke-only clean repo: three 640x480 test frames."""
    root = tmp_path_factory.mktemp("warpin")
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["sources"] = {"synthetic_smoke": {**raw["sources"]["synthetic_smoke"], "options": {
        "n_train": 1, "n_val": 1, "n_test": 1, "frames_per_sequence": 3}}}
    raw["build"].update(conditions=[], compound=[])
    raw["firespread"] = {"enabled": False}
    raw["paths"] = {"sources": str(root / "sources"), "dataset": str(root / "repo")}
    params = Params.from_dict(raw)
    for src in params.sources:
        materialize_source(src, params.benchmark_version, params.sources_dir)
    build_repo(params, progress=False)
    return root / "repo"


def _manifest(repo: Path) -> dict:
    return json.loads((repo / "manifest.json").read_text())


def _frames(repo: Path, config: str, split: str = "synthetic_smoke") -> dict[str, np.ndarray]:
    m = _manifest(repo)
    out = {}
    for s in m["configs"][config]["splits"][split]["shards"]:
        t = pq.read_table(repo / s["path"], columns=["image_id", "image"])
        blobs = t.column("image").combine_chunks().field("bytes").to_pylist()
        out.update((i, decode_image(b, i)) for i, b in zip(t.column("image_id").to_pylist(), blobs))
    return out


@pytest.fixture(scope="module")
def frcnn(tmp_path_factory) -> Path:
    from torchvision.models.detection import fasterrcnn_resnet50_fpn

    from aegisbench.detectors.torchvision_adapter import save_fasterrcnn

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("frcnn") / "frcnn.pt"
    save_fasterrcnn(fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=2), path, ["smoke"])
    return path


@pytest.fixture(scope="module")
def yolo_pt(tmp_path_factory) -> Path:
    """The tiny YOLO with BatchNorm statistics of random inputs, so (unlike the freshly
    initialised net, whose outputs are its biases) its predictions depend on the input."""
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    import_ultralytics()
    from ultralytics import YOLO

    from _detkit import trained_checkpoint  # detect refuses untrained checkpoints

    model = YOLO(str(trained_checkpoint(TINY_YOLO, tmp_path_factory.mktemp("trained") / "t.pt", ("smoke",))))
    torch.manual_seed(0)
    for mod in model.model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.momentum = None
            mod.reset_running_stats()
    model.model.train()
    with torch.no_grad():
        model.model(torch.rand(4, 3, 256, 256))
    model.model.eval()
    path = tmp_path_factory.mktemp("yolo") / "tiny.pt"
    model.save(path)
    return path


class _Stop(Exception):
    pass


def _model_input(det: Detector, image: np.ndarray, noise: InputNoise | None = None, stop: bool = False):
    """The tensor the network's forward receives for ``image`` (``stop``: abort there)."""
    if det.name == "fasterrcnn":
        net = det.model.backbone
    else:
        det.predict([image])  # builds the predictor (and its AutoBackend) once
        net = det.model.predictor.model.model
    seen = []

    def hook(module, args):
        seen.append(args[0].detach().float().cpu().clone())
        if stop:
            raise _Stop

    h = net.register_forward_pre_hook(hook)
    try:
        det.predict([image]) if noise is None else det.predict([image], noise=noise)
    except _Stop:
        pass
    finally:
        h.remove()
    return seen[0][0]


def _noise_ratio(clean: "torch.Tensor", noisy: "torch.Tensor") -> float:
    """SD of the noise reaching the model over the seed's ``a * sigma(model input)``."""
    return float((noisy - (1 - A) * clean).std(correction=0) / (A * clean.std(correction=0)))


@pytest.mark.parametrize("kind", ["yolo", "fasterrcnn"])
def test_noise_reaching_the_model_is_the_seeds_at_every_input_size(repo, frcnn, yolo_pt, kind):
    clean = next(iter(_frames(repo, "clean").items()))
    image_id, frame = clean
    stored = warp_noise(frame, rng_for("stored", image_id), a=A)  # the noise on the full frame, 8-bit
    weights = yolo_pt if kind == "yolo" else frcnn
    stop = kind == "fasterrcnn"
    ratios = {}
    for imgsz in (256, 640):
        det = load_detector(kind, weights, DetectorOptions(conf=0.0, imgsz=imgsz, max_det=20))
        x = _model_input(det, frame, stop=stop)
        noise = InputNoise(A, (("test", image_id),))
        seed = _model_input(det, frame, noise, stop=stop)
        assert seed.shape == x.shape and not torch.equal(seed, x)
        assert torch.equal(seed, _model_input(det, frame, noise, stop=stop))  # same key, same noise
        ratios[imgsz] = (_noise_ratio(x, seed), _noise_ratio(x, _model_input(det, stored, stop=stop)))
    print(f"{kind}: noise SD / (a * sigma) at imgsz 256, 640 (seed formula, stored frame): {ratios}")
    for seed_ratio, _ in ratios.values():
        assert seed_ratio == pytest.approx(1.0, abs=0.02)
    assert ratios[256][1] < 0.8  # the stored frame's noise is largely averaged away by the resize


def test_noise_function_follows_the_formula_per_image():
    x = torch.rand(2, 3, 16, 20)
    noise = InputNoise(0.3, (("a",), ("b",)))
    y = add_input_noise(x, noise)
    r = torch.from_numpy(rng_for("warp_input_noise", "b").standard_normal((3, 16, 20), dtype=np.float32))
    torch.testing.assert_close(y[1], 0.7 * x[1] + 0.3 * x[1].std(correction=0) * r)
    torch.testing.assert_close(add_input_noise(x[1:], InputNoise(0.3, (("b",),)))[0], y[1], rtol=0, atol=0)
    assert torch.equal(warp_input_noise(x[0], 0.0, rng_for("z")), x[0])  # a = 0: unchanged, no clipping
    assert add_input_noise(x.half(), noise).dtype == torch.float16
    with pytest.raises(BadInput):
        InputNoise(1.5, (("a",),))
    with pytest.raises(ValueError, match="noise keys"):
        add_input_noise(x, InputNoise(0.3, (("a",),)))


def test_noise_never_depends_on_the_batch(repo, yolo_pt):
    frames = list(_frames(repo, "clean").values())
    det = load_detector("yolo", yolo_pt, DetectorOptions(conf=0.0, imgsz=256))
    det.predict(frames[:1])
    seen = []
    h = det.model.predictor.model.model.register_forward_pre_hook(lambda m, a: seen.append(a[0].clone()))
    det.predict(frames[:2], noise=InputNoise(A, (("k", 0), ("k", 1))))
    det.predict(frames[1:2], noise=InputNoise(A, (("k", 1),)))
    h.remove()
    assert torch.equal(seen[0][1], seen[1][0])

    class Plain(Detector):  # not a wrapped detector: cannot add noise at its input
        def predict_windows(self, windows):
            return [Detections(np.zeros((0, 4), np.float32), np.zeros(0, np.float32))] * len(windows)

    with pytest.raises(BadInput, match="model input"):
        Plain(DetectorOptions()).predict(frames[:1], noise=InputNoise(A, (("k",),)))


def _sweep(det, repo, out: Path, levels=(A, 0.4), **kw) -> dict:
    """A fresh smoke submission of ``det`` at ``out`` (clean predictions) with its noise sweep."""
    run = RunOptions(frames_per_batch=2, progress=False)
    run_detect(det, repo, "smoke", out, SubmissionInfo(name="w", model="tiny"), run)
    return run_noise_sweep(det, repo, out, levels, run, **kw)


def test_the_sweep_predicts_clean_frames_with_input_noise(repo, yolo_pt, tmp_path):
    from aegisbench.detectors.ray_runner import plan_jobs, run_job

    m = _manifest(repo)
    opts = DetectorOptions(conf=0.0, imgsz=256, max_det=50)
    det = load_detector("yolo", yolo_pt, opts)
    report = _sweep(det, repo, tmp_path / "a")
    assert (report["levels"], report["frames_per_level"]) == (2, 3)
    _sweep(load_detector("yolo", yolo_pt, opts), repo, tmp_path / "b")
    a = pq.read_table(tmp_path / "a" / "warp_noise.parquet")
    assert a.equals(pq.read_table(tmp_path / "b" / "warp_noise.parquet"))  # deterministic rerun
    meta = yaml.safe_load((tmp_path / "a" / "submission.yaml").read_text())
    assert meta["warp_noise"] == {"levels": [A, 0.4], "noise_at": WARP_INPUT}
    assert "warp_noise" not in meta["detector"]  # detect itself adds no noise
    assert {c for c in pq.read_table(tmp_path / "a" / "predictions.parquet").column("config").to_pylist()} == {
        "clean"}  # the repo stores no noise config: only clean was detected

    rows = a.to_pylist()
    got = {}
    for r in rows:
        if r["config"] == WARP:
            got.setdefault(r["image_id"], []).append((r["x1"], r["y1"], r["x2"], r["y2"], r["score"]))
    assert {r["split"] for r in rows} == {"synthetic_smoke"} and {r["config"] for r in rows} <= {WARP, "warp_noise_400"}
    clean = _frames(repo, "clean")
    ids = sorted(clean)
    assert sorted(got) == ids
    noise = input_noise(m, {WARP: A}, (WARP, "synthetic_smoke"), ids)
    want = det.predict([clean[i] for i in ids], noise=noise)
    on_frame = det.predict([warp_noise(clean[i], rng_for("stored", i), a=A) for i in ids])
    for i, w, s in zip(ids, want, on_frame):
        # batches of 2 frames against one batch of all: same boxes up to float rounding of the conv kernels
        mine = np.array(sorted(got[i]), np.float32)
        want_i = np.array(sorted(np.c_[w.xyxy, w.score].tolist()), np.float32)
        frame_i = np.array(sorted(np.c_[s.xyxy, s.score].tolist()), np.float32)
        assert mine.shape == want_i.shape and np.allclose(mine, want_i, atol=1e-2, rtol=1e-4)
        assert mine.shape != frame_i.shape or not np.allclose(mine, frame_i, atol=1e-2, rtol=1e-4)

    # the worker / Ray Data job path reads the same clean frames with the same noise
    plan = {WARP: ["synthetic_smoke"]}
    jobs = plan_jobs(repo, m, plan, [WARP], 2, {WARP: A})
    assert all(j.noise is not None and j.noise.level == A for j in jobs)
    assert all("clean" in Path(p).parts for j in jobs for p, _ in j.rows)
    results = [run_job(det, j) for j in jobs]
    job_dets = dict(zip([i for r in results for i in r.image_ids], [d for r in results for d in r.detections]))
    for i, w in zip(ids, want):
        assert job_dets[i].xyxy.shape == w.xyxy.shape and np.allclose(job_dets[i].xyxy, w.xyxy, atol=1e-2, rtol=1e-4)
        assert np.allclose(job_dets[i].score, w.score, atol=1e-4)

    paths, keep = input_shards(repo, m, WARP, "synthetic_smoke", at_input=True)
    assert keep is None and all("clean" in p.parts for p in paths)
    assert run_key(det, m, "smoke", warp_noise=WARP_INPUT) != run_key(det, m, "smoke")  # old parts never reused


def test_a_second_sweep_replaces_the_first_and_other_tracks_are_refused(repo, yolo_pt, tmp_path):
    det = load_detector("yolo", yolo_pt, DetectorOptions(conf=0.0, imgsz=256, max_det=50))
    first = _sweep(det, repo, tmp_path / "s", levels=(A,))
    again = run_noise_sweep(det, repo, tmp_path / "s", (A, 0.4), RunOptions(frames_per_batch=2, progress=False))
    assert (first["levels_run"], again["levels"], again["frames"]) == (1, 2, 6)  # a finished run leaves no parts
    t = pq.read_table(tmp_path / "s" / "warp_noise.parquet")
    assert sorted(set(t.column("config").to_pylist())) == [WARP, "warp_noise_400"]
    assert yaml.safe_load((tmp_path / "s" / "submission.yaml").read_text())["warp_noise"]["levels"] == [A, 0.4]
    sar_like = tmp_path / "nope"
    sar_like.mkdir()
    (sar_like / "submission.yaml").write_text(yaml.safe_dump({"track": "sar"}))
    with pytest.raises(BadInput, match="smoke track"):
        run_noise_sweep(det, repo, sar_like, (A,))
    assert sorted(p.name for p in sar_like.iterdir()) == ["submission.yaml"]


@pytest.mark.ray_driver
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")
def test_the_sweep_on_ray_equals_local(repo, yolo_pt, tmp_path):
    """Real Ray Data actors read the clean frames and add the same noise as the local run."""
    ray = pytest.importorskip("ray")
    from aegisbench.executor import Executor

    det = load_detector("yolo", yolo_pt, DetectorOptions(conf=0.0, imgsz=256, max_det=50))
    _sweep(det, repo, tmp_path / "local")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _sweep(det, repo, tmp_path / "ray", executor=Executor("ray", workers=2))
    finally:
        ray.shutdown()
    for name in ("warp_noise.parquet", "predictions.parquet", "submission.yaml"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
