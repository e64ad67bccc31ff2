"""examples/evaluate_voc_folder.py runs end to end on a user's VOC folder (generated here in the
HIT-UAV layout) with a real Ultralytics detector built from its YAML and trained one epoch:
dataset repo built and verified, every config detected, scored, the per-condition table
printed and written as CSV; a folder with a class the map does not name stops with exit 2."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path


from _detkit import TINY_YOLO, trained_checkpoint
from aegisbench.dataset.verify import verify_repo
from test_adapters import put, text
from test_adapters_layouts import scene, voc_xml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "evaluate_voc_folder.py"


def _voc(root: Path) -> Path:
    frames = {**{f"tr{i}": "train" for i in range(2)}, **{f"va{i}": "val" for i in range(2)},
              **{f"te{i}": "test" for i in range(3)}}
    for k, (stem, split) in enumerate(frames.items()):
        img = scene(stem)
        img[20:50, 30 + k:45 + k] = 250  # a bright "person"
        put(root / "JPEGImages" / f"{stem}.jpg", img)
        text(root / "Annotations" / f"{stem}.xml", voc_xml(f"{stem}.jpg", 128, 96, [("Person", 30 + k, 20, 45 + k, 50),
                                                                                ("Car", 70, 60, 100, 90)]))
    for split in ("train", "val", "test"):
        text(root / "ImageSets" / "Main" / f"{split}.txt", "".join(f"{s}\n" for s, sp in frames.items() if sp == split))
    return root


def _run(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=900)


def test_the_voc_example_runs_end_to_end(tmp_path):
    voc = _voc(tmp_path / "myvoc")
    weights = trained_checkpoint(TINY_YOLO, tmp_path / "mine.pt")
    work = tmp_path / "work"
    done = _run("--voc", str(voc), "--name", "myvoc", "--split-mode", "lists", "--class-map", "Person=person,Car=none",
                "--license", "CC-BY-4.0", "--conditions", "low_light_s3,motion_blur_s1", "--weights", str(weights),
                "--imgsz", "64", "--n-resamples", "20", "--work", str(work), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert verify_repo(work / "aegisbench").ok
    with open(work / "table.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["config"], r["metric"]) for r in rows} == {(c, m) for c in ("clean", "low_light_s3", "motion_blur_s1")
                                                           for m in ("recall", "precision", "f1")}
    recall = {r["config"]: r for r in rows if r["metric"] == "recall"}
    assert all(r["n"] == "3" for r in recall.values())  # the 3 persons of the official test list
    for r in recall.values():
        if r["value"]:
            assert float(r["lo"]) <= float(r["value"]) <= float(r["hi"])
    assert (work / "results" / "mine" / "metrics.parquet").is_file()
    assert "clean" in done.stdout and f"wrote {work / 'table.csv'}" in done.stdout


def test_the_voc_example_stops_on_bad_input(tmp_path):
    voc = _voc(tmp_path / "myvoc")
    done = _run("--voc", str(voc), "--name", "myvoc", "--split-mode", "lists", "--class-map", "Person=person",
                "--weights", str(tmp_path / "none.pt"), "--work", str(tmp_path / "work"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("error: "), done.stderr
    assert "Car" in done.stderr and not (tmp_path / "work" / "aegisbench").exists()
