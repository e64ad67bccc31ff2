"""perf/main_job.py reads the scheduler's stamped lines into a stage timeline (the table it
writes into docs/PERFORMANCE.md), on a log written the way it stamps one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("main_job", ROOT / "perf" / "main_job.py")
main_job = importlib.util.module_from_spec(spec)
spec.loader.exec_module(main_job)


def test_timeline_from_a_stamped_log(tmp_path):
    t0 = 1_000_000.0
    lines = [(0, "# perf/main_job.py: aegisbench run in /x"),
             (1, "INFO aegisbench.pipeline.schedule: stage sources: starting (1 running)"),
             (43, "INFO aegisbench.pipeline.schedule: stage sources: done at 0.7 min"),
             (43, "INFO aegisbench.pipeline.schedule: stage train_reference@smoke: starting (1 running)"),
             (44, "INFO aegisbench.pipeline.schedule: stage build: starting (2 running, nice +10)"),
             (650, "INFO aegisbench.pipeline.schedule: stage build: done at 10.1 min"),
             (651, "Stage 'ladders' didn't change, skipping"),
             (900, "dataset repo: /x/data/aegisbench")]
    log = tmp_path / "main_job.log"
    log.write_text("".join(f"{t0 + s:.3f} {text}\n" for s, text in lines) + "rc=0\n")
    got = main_job.timeline(log)
    assert got["total_min"] == 15.0 and got["rc"] == 0
    assert got["stages"]["sources"] == {"start": round(1 / 60, 2), "end": round(43 / 60, 2), "beside": 0, "nice": 0}
    assert got["stages"]["build"] == {"start": round(44 / 60, 2), "end": round(650 / 60, 2), "beside": 1, "nice": 10}
    assert "end" not in got["stages"]["train_reference@smoke"]  # never finished: said so in the table
    table = main_job.markdown({"commit": "abcdef123", "machine": {"cpu": "CPU X", "cores": 2}, "rc": 0,
                               "load_before": 0.1, "load_peak": 2.5, **got})
    rows = [r for r in table.splitlines() if r.startswith("| ") and "---" not in r][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| sources", "| train_reference@smoke", "| build"]
    assert "n/a (did not finish)" in rows[1] and "| +10 |" in rows[2]
    assert "**15.0 min** (exit 0), 2 cores of CPU X" in table
    assert got["skipped"] == ["ladders"] and "dvc skipped as unchanged (every dependency at its committed" in table
    assert "Committed outputs" not in table  # not known from a log alone


def test_a_clean_clone_that_reproduces_its_committed_outputs_says_so(tmp_path):
    """``changed_outputs`` is git's word on the clone after the run: nothing changed, or which
    committed files the run rewrote or added (a real repository)."""
    import subprocess

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    git("add", "dvc.lock")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "outputs")
    result = {"commit": "abcdef123", "machine": {"cpu": "CPU X", "cores": 2}, "total_min": 1.0, "stages": {}}
    assert main_job.changed_outputs(tmp_path) == []
    assert "Committed outputs: reproduced byte for byte" in main_job.markdown({**result, "changed_outputs": []})
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (tmp_path / "new.json").write_text("{}")
    changed = main_job.changed_outputs(tmp_path)
    assert changed == ["dvc.lock", "new.json"]
    assert "**2 committed file(s) changed or added** by the run: `dvc.lock`, `new.json`." in main_job.markdown(
        {**result, "changed_outputs": changed})


def test_recall_floors_are_judged_for_the_row_and_every_training_seed(tmp_path):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "sources": {"synthetic_smoke": {"track": "smoke"}, "synthetic_sar": {"track": "sar"}},
        "reference_detector": {"recall_floor": 0.8, "sources": {"synthetic_smoke": {"recall_floor": 0.5}}}}))
    for track, source, value in (("smoke", "synthetic_smoke", 0.55), ("sar", "synthetic_sar", 0.79)):
        (tmp_path / f"results/reference_{track}").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist([
            {"source": source, "config": "clean", "metric": "recall", "value": value, "lo": value - 0.1,
             "hi": value + 0.1},
            {"source": source, "config": "clean", "metric": "precision", "value": 0.1, "lo": 0.0, "hi": 0.2}]),
            tmp_path / f"results/reference_{track}/metrics.parquet")
    (tmp_path / "seeds/reference_smoke").mkdir(parents=True)
    (tmp_path / "seeds/reference_smoke/seeds.json").write_text(json.dumps({"clean_recall": {"0": 0.55, "1": 0.41,
                                                                                             "2": 0.6}}))
    floors = {f["source"]: f for f in main_job.recall_floors(tmp_path)}
    assert floors["synthetic_smoke"]["met"] is True and floors["synthetic_sar"]["met"] is False
    table = main_job.markdown({"commit": "abcdef123", "machine": {"cpu": "CPU X", "cores": 2}, "rc": 0,
                               "total_min": 1.0, "stages": {}, "recall_floors": list(floors.values())})
    assert "Reference `synthetic_sar`: clean test recall 0.790 [0.690, 0.890]: **not met** (floor 0.80)." in table
    assert ("Every training seed (seed 0: 0.550, seed 1: 0.410, seed 2: 0.600): **not met** by seed 1." in table)
    assert table.count("Every training seed") == 1  # the SAR reference has no seed table: one seed, no line
