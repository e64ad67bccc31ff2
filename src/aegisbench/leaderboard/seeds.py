"""Training seeds of the reference rows (issue 36 item 3): how many seeds each reference
detector was trained with, and per condition its metric across those seeds beside the
bootstrap interval of the row's own seed, so a reader can tell a training-seed difference
from a condition effect.

``aegisbench reference-seeds`` (:mod:`aegisbench.pipeline.seeds`) writes one long table per
reference, ``<seeds folder>/<submission>/seeds.parquet`` (:data:`COLUMNS`); the leaderboard
reads it here and shows, per reference row, its seed count and, with two seeds or more, the
spread table. Nothing here trains or scores.

>>> import polars as pl
>>> long = pl.DataFrame({"submission": ["r"] * 4, "seed": [0, 1, 0, 1], "primary": [True, False, True, False],
...                      "source": ["s"] * 4, "config": ["clean", "clean", "fog_s1", "fog_s1"],
...                      "severity": [0, 0, 1, 1], "metric": ["recall"] * 4, "value": [0.8, 0.7, 0.5, 0.52],
...                      "lo": [0.75, 0.6, 0.45, 0.5], "hi": [0.85, 0.8, 0.55, 0.6]})
>>> [(r["config"], r["values"], round(r["range"], 2), r["wider"]) for r in spread_rows(long, "r", "s", "recall")]
[('clean', [0.8, 0.7], 0.1, True), ('fog_s1', [0.5, 0.52], 0.02, False)]
"""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

SEEDS_FILE = "seeds.parquet"
#: the seed table's columns; ``primary``: the seed of the row on the leaderboard (its results folder)
COLUMNS = {"submission": pl.String, "seed": pl.Int64, "primary": pl.Boolean, "source": pl.String,
           "config": pl.String, "severity": pl.Int64, "metric": pl.String, "value": pl.Float64,
           "lo": pl.Float64, "hi": pl.Float64}


def check_seed_table(df: pl.DataFrame, submission: str, where: str) -> pl.DataFrame:
    """``df`` with exactly :data:`COLUMNS` (cast), one submission, one primary seed and one
    row per (seed, source, config, metric); BadInput naming ``where`` otherwise."""
    missing = sorted(set(COLUMNS) - set(df.columns))
    if missing:
        raise BadInput(f"seed table lacks columns {missing}", where=where)
    try:
        df = df.select([pl.col(c).cast(t, strict=True) for c, t in COLUMNS.items()])
    except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
        raise BadInput(f"seed table column of the wrong type: {str(exc).splitlines()[0][:200]}", where=where) from None
    if set(df["submission"].unique().to_list()) != {submission}:
        raise BadInput(f"seed table of another submission than {submission!r}", where=where)
    primaries = df.filter(pl.col("primary"))["seed"].unique().to_list()
    if len(primaries) != 1:
        raise BadInput(f"seed table needs exactly one primary seed, has {sorted(primaries)}", where=where)
    if df.select(["seed", "source", "config", "metric"]).is_duplicated().any():
        raise BadInput("seed table repeats a (seed, source, config, metric) row", where=where)
    return df


def read_seeds(folder: str | Path | None, submissions) -> pl.DataFrame | None:
    """The seed tables of ``submissions`` found under ``folder`` (one long table), or None
    when ``folder`` is None. A submission without a table is simply absent from it."""
    if folder is None:
        return None
    frames = []
    for sub in sorted(submissions):
        path = Path(folder) / sub / SEEDS_FILE
        if not path.is_file():
            log.info("%s: no seed table at %s", sub, path)
            continue
        try:
            df = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise BadInput(f"unreadable seed table: {str(exc).splitlines()[0][:200]}", where=str(path)) from None
        frames.append(check_seed_table(df, sub, str(path)))
    return pl.concat(frames) if frames else pl.DataFrame(schema=COLUMNS)


def seeds_of(long: pl.DataFrame | None, submission: str) -> tuple[list[int], int | None]:
    """``(seeds, primary seed)`` of ``submission`` in the seed table (``([], None)``: none recorded)."""
    if long is None:
        return [], None
    rows = long.filter(pl.col("submission") == submission)
    if rows.is_empty():
        return [], None
    return sorted(rows["seed"].unique().to_list()), rows.filter(pl.col("primary"))["seed"][0]


def spread_rows(long: pl.DataFrame, submission: str, source: str, metric: str) -> list[dict]:
    """Per condition of ``source`` (clean first, then by severity and name): the ``metric``
    value of every seed (in seed order, None where a seed has no value), their range, the
    primary seed's value and bootstrap interval, and ``wider``: the seed range exceeds that
    interval's width (a seed difference as large as the printed uncertainty)."""
    rows = long.filter((pl.col("submission") == submission) & (pl.col("source") == source)
                       & (pl.col("metric") == metric))
    seeds = sorted(rows["seed"].unique().to_list())
    out = []
    for (config, severity), g in sorted(rows.group_by(["config", "severity"]),
                                        key=lambda kv: (kv[0][0] != "clean", kv[0][1], kv[0][0])):
        by_seed = {r["seed"]: r for r in g.iter_rows(named=True)}
        values = [by_seed[s]["value"] if s in by_seed else None for s in seeds]
        have = [v for v in values if v is not None]
        prim = next((r for r in by_seed.values() if r["primary"]), None)
        rng = max(have) - min(have) if len(have) >= 2 else None
        width = None if prim is None or prim["lo"] is None or prim["hi"] is None else prim["hi"] - prim["lo"]
        out.append({"config": config, "severity": severity, "values": values, "seeds": seeds,
                    "value": None if prim is None else prim["value"], "lo": None if prim is None else prim["lo"],
                    "hi": None if prim is None else prim["hi"], "range": rng, "width": width,
                    "wider": None if rng is None or width is None else rng > width})
    return out


def seed_note(submission: str, seeds: list[int], primary: int | None) -> str:
    """One sentence: how many training seeds the reference row has (plain text).

    >>> seed_note("reference_sar", [0], 0)
    'reference_sar: 1 training seed (seed 0; params.yaml reference.seeds: 1): the spread a new training seed makes is not measured in this build.'
    >>> seed_note("reference_sar", [], None)
    'reference_sar: training seeds not recorded (no seed table).'
    """
    if not seeds:
        return f"{submission}: training seeds not recorded (no seed table)."
    if len(seeds) == 1:
        return (f"{submission}: 1 training seed (seed {seeds[0]}; params.yaml reference.seeds: 1): the spread a new "
                "training seed makes is not measured in this build.")
    return (f"{submission}: {len(seeds)} training seeds ({', '.join(map(str, seeds))}; params.yaml reference.seeds: "
            f"{len(seeds)}); every table shows seed {primary}, the others appear only in the seed table.")


def seed_views(long: pl.DataFrame | None, section, metric: str | None) -> list[dict]:
    """Per reference model of ``section`` (a :class:`~aegisbench.leaderboard.tables.Section`):
    its seed note and, with two seeds or more, the ``metric`` spread rows as display text
    (the Markdown and the site lay out the same view). Empty when no seed folder was given."""
    from aegisbench.leaderboard.tables import fmt_interval, fmt_value, label

    if long is None or not metric:
        return []
    views = []
    for m in section.models:
        if not m.reference:
            continue
        seeds, primary = seeds_of(long, m.submission)
        view = {"submission": m.submission, "note": seed_note(m.submission, seeds, primary), "seeds": seeds,
                "primary": primary, "label": label(metric, section.track), "rows": [], "wider": 0,
                "missing": False}
        if len(seeds) >= 2:
            order = {c["config"]: i for i, c in enumerate(section.conditions)}  # the section's own order
            rows = sorted(spread_rows(long, m.submission, section.source, metric),
                          key=lambda r: (order.get(r["config"], len(order)), r["config"]))
            for r in rows:
                view["rows"].append({
                    "config": r["config"], "severity": r["severity"],
                    "row": f"{fmt_value(metric, r['value'])} {fmt_interval(metric, r['lo'], r['hi'])}".strip(),
                    "values": [fmt_value(metric, v) if v is not None else "—" for v in r["values"]],
                    "range": "—" if r["range"] is None else fmt_value(metric, r["range"]),
                    "width": "—" if r["width"] is None else fmt_value(metric, r["width"]),
                    "wider": {None: "—", True: "yes", False: "no"}[r["wider"]]})
            view["wider"] = sum(r["wider"] == "yes" for r in view["rows"])
            view["missing"] = any("—" in r["values"] for r in view["rows"])
        views.append(view)
    return views
