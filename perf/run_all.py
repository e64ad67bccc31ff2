"""Run the perf/ benchmarks, print one summary table and write it into docs/PERFORMANCE.md.

Each benchmark runs in its own process with ``--json``; their rows are collected into one
``work | ours | peer | ratio | target | met`` table (see :mod:`_bench`), printed, and written
atomically (temp file + rename) between the ``<!-- perf-summary:start -->`` and
``<!-- perf-summary:end -->`` markers of docs/PERFORMANCE.md (not with ``--only``). ``--quick`` runs small sizes
and few rounds (minutes): it checks the benchmarks, prints its table and never writes the docs; a target
is judged only at the size it names, so a quick run's rows say ``— (quick)`` where a full run says yes
or no.
A benchmark that leaves no result gets a row saying so; the exit status is then 1.

Run: ``.venv/bin/python perf/run_all.py [--quick] [--only NAME ...] [--no-docs] [--json-dir DIR]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _bench import ROOT, row, table

START, END = "<!-- perf-summary:start -->", "<!-- perf-summary:end -->"
DOC = ROOT / "docs" / "PERFORMANCE.md"
# name -> (arguments of a full run, arguments of a quick run)
BENCHMARKS = {
    "corruptions": ([], ["--sizes", "640x480", "--rounds", "5"]),
    "firespread": ([], ["--grids", "64", "--rounds", "3", "--per-round", "2"]),
    "detect": ([], ["--images", "8", "--repeat", "3"]),
    "tiling": ([], ["--width", "2000", "--height", "1500", "--repeat", "1"]),
    "evaluate": ([], ["--coco-images", "300", "--rounds", "3"]),
    "scale": (["--memory"], ["--images", "8", "--memory", "--memory-images", "8", "--memory-scales", "1,8"]),
    "serve": ([], ["--uploads", "10", "--burst", "4"]),
    "conv_gemm": ([], ["--rounds", "1", "--train-images", "8"]),
}


def run(name: str, args: list[str], out: Path) -> tuple[list[dict], int]:
    """Run one benchmark (its output passes through); its rows, or one row saying it left none."""
    print(f"\n=== perf/{name}.py {' '.join(args)}", flush=True)
    out.unlink(missing_ok=True)
    rc = subprocess.run([sys.executable, str(ROOT / "perf" / f"{name}.py"), "--json", str(out), *args],
                        cwd=ROOT).returncode
    if not out.exists():
        return [row(f"perf/{name}.py left no result (exit {rc}; see its output)", None)], rc
    return json.loads(out.read_text())["rows"], rc


def summary(results: dict[str, list[dict]], quick: bool, command: str) -> str:
    """The Markdown of the summary section (between the markers)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    commit = (head.strip() or "?") + (" (with local changes)" if dirty else "")
    lines = [f"## Summary: `{command}`", "",
             f"Written by `perf/run_all.py` on {when}, commit {commit}, {os.cpu_count()} cores, load average {load}"
             " at the end." + (" **Quick run** (small sizes, few rounds): it checks the benchmarks; quote the full"
                               " run." if quick else ""),
             "ratio: how many times ours outperforms the peer on the same work (peer time / our time, or our"
             " throughput / theirs), only where both sides were measured; met: the target judged on what was"
             " measured (— where there is nothing to judge).", ""]
    rows = []
    for name, rs in results.items():
        rows.append({"work": f"perf/{name}.py", "section": True})
        rows += [quick_row(r) for r in rs] if quick else rs
    lines.append(table(rows))
    return "\n".join(lines)


def quick_row(r: dict) -> dict:
    """A row of a quick run: its numbers, but no verdict (the targets name full-run sizes)."""
    return {**r, "met": "quick"} if r.get("met") is not None else r


def write_doc(doc: Path, section: str) -> None:
    """Replace the text between the markers of ``doc`` with ``section`` (atomically)."""
    from aegisbench.atomic import atomic_write_text

    text = doc.read_text()
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"{doc}: needs one {START} line followed by one {END} line")
    before, rest = text.split(START)
    _, after = rest.split(END)
    atomic_write_text(doc, f"{before}{START}\n{section}\n{END}{after}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes and few rounds (checks, not numbers to quote)")
    ap.add_argument("--only", action="append", choices=list(BENCHMARKS),
                    help="only this benchmark (repeatable; the docs are then left alone)")
    ap.add_argument("--no-docs", action="store_true", help=f"leave {DOC.relative_to(ROOT)} alone")
    ap.add_argument("--json-dir", type=Path, help="keep each benchmark's JSON here (default: a temporary folder)")
    a = ap.parse_args(argv)
    command = "perf/run_all.py" + (" --quick" if a.quick else "") + "".join(f" --only {n}" for n in a.only or [])
    results, failed = {}, []
    with tempfile.TemporaryDirectory(prefix="aegis-perf-") as tmp:
        folder = a.json_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in a.only or BENCHMARKS:
            results[name], rc = run(name, BENCHMARKS[name][1 if a.quick else 0], folder / f"{name}.json")
            if not (folder / f"{name}.json").exists():
                failed.append(name)
            elif rc:
                print(f"(perf/{name}.py exited {rc}: its rows are kept)", flush=True)
    section = summary(results, a.quick, command)
    print(f"\n{section}\n", flush=True)
    if a.only or a.quick:
        print(f"(--only / --quick: {DOC.relative_to(ROOT)} keeps the summary of a full run of every benchmark)")
    elif not a.no_docs:
        write_doc(DOC, section)
        print(f"summary written to {DOC.relative_to(ROOT)}")
    if failed:
        print(f"no result from: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
