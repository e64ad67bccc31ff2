"""What these results show, in a few generated sentences per detection source: which condition
family is mildest and which harshest for the model, where its recall collapses, and whether each
collapse is silent (the detections vanish, no false alarms: ``silent_failure``) or loud (false
positives flood in). Computed from the section's own cells, so the page never states a finding
the data do not show (the seed paper's "silent low-light failure" appears only where it holds).

Rules (pure functions of a :class:`~aegisbench.leaderboard.tables.Section`):

* the model: the first reference row of the section, else its first row;
* a family's severity is its conditions' mean recall as a share of clean recall (every severity
  of every corruption in it, each counted once); mildest and harshest are the extremes;
* a **collapse** is a condition whose recall is at most half the clean recall and whose interval
  lies wholly below the clean interval (a drop the bootstrap does not explain);
* a collapse is **silent** when the evaluator flags ``silent_failure``, **loud** when false
  positives at least double against clean, else **quiet** (recall lost, neither).

>>> cells = {("m", "clean", "recall"): {"value": 0.8, "lo": 0.7, "hi": 0.9},
...          ("m", "clean", "fp"): {"value": 20.0, "lo": None, "hi": None},
...          ("m", "low_light_s3", "recall"): {"value": 0.1, "lo": 0.0, "hi": 0.2},
...          ("m", "low_light_s3", "fp"): {"value": 900.0, "lo": None, "hi": None},
...          ("m", "rain_streaks_s3", "recall"): {"value": 0.7, "lo": 0.6, "hi": 0.8}}
>>> conds = [{"config": "low_light_s3", "family": "storm", "corruption": "low_light", "severity": 3},
...          {"config": "rain_streaks_s3", "family": "storm", "corruption": "rain_streaks", "severity": 3}]
>>> f = model_findings(cells.get, "m", conds)
>>> [(c["config"], c["kind"]) for c in f["collapses"]], f["families"][0]["family"], round(f["families"][0]["share"], 3)
([('low_light_s3', 'loud')], 'storm', 0.5)
"""

from __future__ import annotations

from collections.abc import Callable

from aegisbench.vocab import CLEAN, DETECTION_TRACKS

#: a collapse keeps at most this share of clean recall
COLLAPSE_SHARE = 0.5
#: a loud collapse has at least this many times the clean false positives
LOUD_FACTOR = 2.0


def _value(cell: dict | None) -> float | None:
    v = None if cell is None else cell.get("value")
    return None if v is None else float(v)


def _collapse(cell: Callable, sub: str, cond: dict, clean: dict) -> dict | None:
    """The collapse at ``cond`` (recall, interval, kind, false positives), or None."""
    rec = cell((sub, cond["config"], "recall"))
    value, hi = _value(rec), rec and rec.get("hi")
    if value is None or value > COLLAPSE_SHARE * clean["value"] or hi is None or clean["lo"] is None \
            or hi >= clean["lo"]:
        return None
    fp, fp_clean = _value(cell((sub, cond["config"], "fp"))), _value(cell((sub, CLEAN, "fp")))
    silent = _value(cell((sub, cond["config"], "silent_failure")))
    if silent is not None and silent >= 0.5:
        kind = "silent"
    elif fp is not None and fp_clean is not None and fp >= LOUD_FACTOR * max(fp_clean, 1.0):
        kind = "loud"
    else:
        kind = "quiet"
    return {"config": cond["config"], "recall": value, "lo": rec.get("lo"), "hi": hi, "kind": kind,
            "fp": fp, "fp_clean": fp_clean}


def model_findings(cell: Callable, sub: str, conditions: list[dict]) -> dict | None:
    """Families by their mean share of clean recall (mildest first) and the collapses of one model;
    ``cell``: ``(submission, config, metric) -> {"value", "lo", "hi"}`` or None; None without a
    clean recall."""
    clean = cell((sub, CLEAN, "recall"))
    if _value(clean) is None or not clean["value"]:
        return None
    clean = {"value": float(clean["value"]), "lo": clean.get("lo"), "hi": clean.get("hi")}
    shares: dict[str, list[float]] = {}
    collapses = []
    for cond in conditions:
        if cond["config"] == CLEAN or not cond.get("family"):
            continue
        value = _value(cell((sub, cond["config"], "recall")))
        if value is None:
            continue
        shares.setdefault(cond["family"], []).append(value / clean["value"])
        found = _collapse(cell, sub, cond, clean)
        if found:
            collapses.append(found)
    families = sorted(({"family": f, "share": sum(v) / len(v), "n": len(v)} for f, v in shares.items()),
                      key=lambda r: (-r["share"], r["family"]))
    return {"clean": clean, "families": families, "collapses": sorted(collapses, key=lambda c: c["recall"])}


def _count(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def section_findings(section, name: Callable[[str], str] = str) -> list[str]:
    """The findings of one detection section as sentences with Markdown emphasis and code spans
    (empty for fire spread or without data); ``name`` makes the submitter's model name inert for
    the output (Markdown escaping; :func:`findings_html` drops the markup characters)."""
    if section.track not in DETECTION_TRACKS or not section.models:
        return []
    model = next((m for m in section.models if m.reference), section.models[0])
    found = model_findings(lambda key: section.cell(*key), model.submission, list(section.conditions))
    if found is None or not found["families"]:
        return []
    fam, c = found["families"], found["clean"]
    out = [f"{name(model.name)} (clean recall {c['value']:.3f}) keeps most recall under **{fam[0]['family']}** (mean "
           f"{fam[0]['share']:.0%} of clean over {fam[0]['n']} conditions) and least under **{fam[-1]['family']}** "
           f"({fam[-1]['share']:.0%} over {fam[-1]['n']})."]
    cols = found["collapses"]
    if not cols:
        out.append("Recall collapses nowhere: no condition keeps half its clean recall or less with an interval "
                   "wholly below the clean one.")
        return out
    out.append(f"Recall collapses (at most half of clean, its interval wholly below clean's) under {len(cols)} "
               f"condition{'s' if len(cols) > 1 else ''}.")
    for kind, what in (("silent", "Silent (flagged a silent failure: the detections vanish without false "
                                  "alarms, the failure an operator does not see)"),
                       ("loud", "Loud (false positives at least double)"),
                       ("quiet", "Neither silent nor loud")):
        mine = [x for x in cols if x["kind"] == kind]
        if not mine:
            continue
        where = ", ".join(f"`{x['config']}` {x['recall']:.3f}" for x in sorted(mine, key=lambda x: x["config"]))
        fps = ""
        if kind == "loud":
            top = max(mine, key=lambda x: x["fp"] or 0)
            fps = f"; false positives {_count(top['fp_clean'])} clean -> {_count(top['fp'])} at `{top['config']}`"
        out.append(f"{what}: {where}{fps}.")
    return out


def findings_html(section) -> list:
    """:func:`section_findings` as safe HTML: everything escaped, then our own ``**x**`` and ``x``
    (code) spans turned into tags; the model name loses ``*`` and backticks first, so it cannot
    open one."""
    import re

    from markupsafe import Markup, escape

    out = []
    for line in section_findings(section, lambda n: n.replace("*", "").replace("`", "")):
        text = str(escape(line))
        text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
        out.append(Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", text)))
    return out
