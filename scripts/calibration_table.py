"""Render calibration reports (``aegisbench calibrate --metrics``) side by side as the Markdown
table of docs/CALIBRATION.md: per corruption and severity the target, where it comes from, and
each report's measured mean with its difference in % and the two verdicts.

    python scripts/calibration_table.py "synthetic_sar=/tmp/cal_synth.json" "hituav=/tmp/cal_hituav.json"
"""

from __future__ import annotations

import json
import sys


def table(reports: dict[str, dict]) -> str:
    names = list(reports)
    first = next(iter(reports.values()))
    head = ["corruption", "statistic", "s", "target"] + [f"{n} (diff %)" for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for corruption, lad in first["corruptions"].items():
        for s, cell in lad["severities"].items():
            row = [f"`{corruption}`", lad["statistic"], s, f"{cell['target']:.4g}"]
            for n in names:
                c = reports[n]["corruptions"][corruption]["severities"][s]
                row.append(f"{c['measured']:.4g} ({c['diff_pct']:+.1f}){'' if c['on_target'] else ' ✗'}")
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "| verdict | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for key, label in (("ladders_monotone", "ladders monotone"), ("cells_on_target", "cells on target (±2 %)")):
        vals = [f"{reports[n][key]}/{len(reports[n]['corruptions']) if key == 'ladders_monotone' else reports[n]['cells']}"
                for n in names]
        lines.append(f"| {label} | " + " | ".join(vals) + " |")
    lines.append("| frames | " + " | ".join(f"{reports[n]['measured_on']['frames']} "
                                           f"({', '.join(reports[n]['measured_on'].get('splits') or ['all'])})"
                                           for n in names) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    given = dict(arg.split("=", 1) for arg in sys.argv[1:])
    sys.stdout.write(table({n: json.load(open(p)) for n, p in given.items()}))
