"""Time the README's main job (``aegisbench run``) on a clean clone and write its stage timeline.

    .venv/bin/python perf/main_job.py [--clone DIR] [--write-docs]
    .venv/bin/python perf/main_job.py --from-log LOG [--clone DIR] [--write-docs]

Clones this checkout's HEAD (committed files only) into DIR (a new temporary folder by default)
and runs ``aegisbench run`` there with this venv: the install is excluded, ``PYTHONPATH`` puts
the clone's package before this checkout's. Every output line is stamped as it arrives
(``<epoch seconds> <line>``, kept in ``DIR/main_job.log``); the scheduler's lines
(``stage NAME: starting`` / ``stage NAME: done at``) give the timeline. ``--from-log`` reads a
log stamped that way instead of running. It prints the timeline as Markdown and writes it, with
the machine (CPU model, cores, load average before and at most during the run), the stages dvc
skipped as unchanged and the committed files the run changed (none: the clean clone reproduced
every committed output byte for byte), to
``runs/main_job.json``; ``--write-docs`` puts the table between the ``main-job-timeline`` markers
of docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "PERFORMANCE.md"
BEGIN, END = "<!-- main-job-timeline -->", "<!-- /main-job-timeline -->"
START = re.compile(r"stage (\S+): starting \((\d+) running(?:, nice \+(\d+))?\)")
DONE = re.compile(r"stage (\S+): done at")
SKIPPED = re.compile(r"Stage '([^']+)' didn't change, skipping")


def machine() -> dict:
    """CPU model and core count of this machine."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count()}


def run_clone(clone: Path, log: Path) -> dict:
    """Clone HEAD into ``clone``, run the main job there, stamp its lines into ``log``."""
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(clone / "src")}
    load_before, peak = os.getloadavg()[0], 0.0
    t0 = time.time()
    with log.open("w") as out, subprocess.Popen([str(venv_bin / "aegisbench"), "run"], cwd=clone, env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                text=True) as proc:
        out.write(f"{t0:.3f} # perf/main_job.py: aegisbench run in {clone}\n")
        for line in proc.stdout:
            peak = max(peak, os.getloadavg()[0])
            out.write(f"{time.time():.3f} {line}")
            out.flush()
    return {"rc": proc.returncode, "load_before": load_before, "load_peak": peak}


def changed_outputs(clone: Path) -> list[str]:
    """The committed files the run changed or added in ``clone`` (``git status --porcelain``): none
    when the clean clone reproduced every committed output byte for byte."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=normal"], cwd=clone, check=True,
                         capture_output=True, text=True).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def timeline(log: Path) -> dict:
    """Stage start and end (minutes from the first line) parsed from a stamped log."""
    stages: dict[str, dict] = {}
    skipped: list[str] = []
    t0 = last = rc = None
    for raw in log.read_text(errors="replace").splitlines():
        stamp, _, text = raw.partition(" ")
        if stamp.startswith("rc=") and stamp[3:].isdigit():  # the exit status a stamping shell appended
            rc = int(stamp[3:])
            continue
        try:
            t = float(stamp)
        except ValueError:
            continue
        t0 = t if t0 is None else t0
        last = t
        if m := START.search(text):
            stages[m[1]] = {"start": round((t - t0) / 60, 2), "beside": int(m[2]) - 1,
                            "nice": int(m[3] or 0)}
        elif (m := DONE.search(text)) and m[1] in stages:
            stages[m[1]]["end"] = round((t - t0) / 60, 2)
        elif m := SKIPPED.search(text):  # dvc found every dep at its dvc.lock hash: nothing to run
            skipped.append(m[1])
    if t0 is None:
        raise SystemExit(f"perf/main_job.py: {log}: no stamped line")
    out = {"total_min": round((last - t0) / 60, 2), "stages": stages, "skipped": skipped}
    return out if rc is None else {**out, "rc": rc}


def recall_floors(project: Path) -> list[dict]:
    """Each reference recipe's ``recall_floor`` (params.yaml ``reference_detector``, per source)
    against the clean test recall its row has in ``results/reference_<track>/metrics.parquet``."""
    import pyarrow.parquet as pq
    import yaml

    params = yaml.safe_load((project / "params.yaml").read_text())
    recipe = params.get("reference_detector") or {}
    out = []
    for source, spec in (params.get("sources") or {}).items():
        floor = {**recipe, **((recipe.get("sources") or {}).get(source) or {})}.get("recall_floor")
        if floor is None:
            continue
        metrics = project / "results" / f"reference_{spec['track']}" / "metrics.parquet"
        rows = [r for r in pq.read_table(metrics).to_pylist() if r["source"] == source
                and r["config"] == "clean" and r["metric"] == "recall"] if metrics.is_file() else []
        value = rows[0] if rows else None
        seeds = project / "seeds" / f"reference_{spec['track']}" / "seeds.json"
        per_seed = json.loads(seeds.read_text()).get("clean_recall", {}) if seeds.is_file() else {}
        out.append({"source": source, "floor": floor, "recall": value and value["value"],
                    "lo": value and value["lo"], "hi": value and value["hi"],
                    "met": None if value is None or value["value"] is None else value["value"] >= floor,
                    "seeds": {k: v for k, v in sorted(per_seed.items(), key=lambda kv: int(kv[0]))}})
    return out


def markdown(result: dict) -> str:
    """The timeline as a Markdown table, with the machine and the total."""
    m = result["machine"]
    load = (f"load average {result['load_before']:.2f} before, at most {result['load_peak']:.2f} during"
            if "load_peak" in result else "load not recorded (read from a log)")
    lines = [f"`aegisbench run` on a clean clone at {result['commit'][:7]}: **{result['total_min']:.1f} min** "
             f"(exit {result.get('rc', 'n/a')}), {m['cores']} cores of {m['cpu']}; {load} (perf/main_job.py).", "",
             "| stage | start (min) | end (min) | minutes | nice |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, s in sorted(result["stages"].items(), key=lambda kv: (kv[1]["start"], kv[0])):
        end = s.get("end")
        took = f"{end - s['start']:.1f}" if end is not None else "n/a (did not finish)"
        lines.append(f"| {name} | {s['start']:.1f} | {end if end is not None else 'n/a'} | {took} | "
                     f"{'+' + str(s['nice']) if s['nice'] else ''} |")
    if result.get("skipped"):
        lines.append(f"\ndvc skipped as unchanged (every dependency at its committed `dvc.lock` hash): "
                     f"{', '.join(result['skipped'])}.")
    if "changed_outputs" in result:
        changed = result["changed_outputs"]
        lines.append("\nCommitted outputs: " + ("reproduced byte for byte (`git status` clean after the run)."
                                                 if not changed else
                                                 f"**{len(changed)} committed file(s) changed or added** by the run: "
                                                 + ", ".join(f"`{c}`" for c in changed[:8])
                                                 + (f" and {len(changed) - 8} more" if len(changed) > 8 else "") + "."))
    for f in result.get("recall_floors", []):
        said = ("n/a (no result)" if f["met"] is None else
                f"{f['recall']:.3f} [{f['lo']:.3f}, {f['hi']:.3f}]: {'met' if f['met'] else '**not met**'}")
        lines.append(f"\nReference `{f['source']}`: clean test recall {said} (floor {f['floor']:.2f}).")
        if len(f.get("seeds") or {}) > 1:  # reference.seeds > 1: the floor holds for every seed, or says which not
            low = [f"seed {k}" for k, v in f["seeds"].items() if v is None or v < f["floor"]]
            every = ", ".join(f"seed {k}: {'n/a' if v is None else f'{v:.3f}'}" for k, v in f["seeds"].items())
            lines.append(f"Every training seed ({every}): " + ("met." if not low else f"**not met** by {', '.join(low)}."))
    return "\n".join(lines) + "\n"


def write_docs(table: str) -> None:
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"perf/main_job.py: {DOC}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    tmp.replace(DOC)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clone", type=Path, help="where to clone (a new temporary folder by default); with "
                    "--from-log: the clone that log ran in (its floors and changed files are read)")
    ap.add_argument("--from-log", type=Path, help="a stamped log of an earlier run instead of running")
    ap.add_argument("--commit", help="with --from-log: the commit that run was of (default: HEAD)")
    ap.add_argument("--write-docs", action="store_true", help="write the table into docs/PERFORMANCE.md")
    args = ap.parse_args(argv)
    commit = args.commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True,
                                           capture_output=True, text=True).stdout.strip()
    extra: dict = {}
    if args.from_log:
        log = args.from_log
    else:
        clone = args.clone or Path(tempfile.mkdtemp(prefix="aegis-main-job-")) / "clone"
        log = clone.parent / "main_job.log"
        extra = run_clone(clone, log)
    result = {"commit": commit, "machine": machine(), **timeline(log), **extra}
    project = args.clone if args.from_log else clone  # --from-log --clone DIR: the clone that log ran in
    if project is not None:
        result["recall_floors"] = recall_floors(project)
        result["changed_outputs"] = changed_outputs(project)
    out = ROOT / "runs" / "main_job.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    table = markdown(result)
    print(table)
    if args.write_docs:
        write_docs(table)
    return 0 if extra.get("rc", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
