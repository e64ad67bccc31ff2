"""The leaderboard as pure functions of the checked results.

``long_table`` keeps every condition in its own row; nothing is averaged away. The
derived views say what they aggregate: ``family_summary`` (mean, min and max over the
corruptions of one family, per severity and over all severities, listing the configs it
covers), ``floor_view`` (the worst condition per model and where it happens),
``relative_drop`` (each condition against the model's own clean score) and
``rank_view`` (order within one condition only; models whose intervals overlap form a
tied group). There is no overall score.

>>> tied_groups([("a", 0.8, 0.7, 0.9), ("b", 0.75, 0.6, 0.85), ("c", 0.2, 0.1, 0.3)], +1)
[['a', 'b'], ['c']]
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from aegisbench.leaderboard.machine import recorded_kernels
from aegisbench.leaderboard.results import FAMILY_OF, Expectation, ResultEntry, Skipped
from aegisbench.metrics import REGISTRY
from aegisbench.metrics.declared import LABEL_MATCH_FLAG
from aegisbench.results_schema import polars_schema
from aegisbench.vocab import CLEAN, FAMILIES

VERIFIED, SELF_REPORTED, PUBLISHED = "verified", "self-reported", "published"

#: The long table: the results columns (types and meanings from :mod:`aegisbench.results_schema`)
#: with the provenance of their submission. ``n_units`` stays in the results (the reader keeps
#: it) but not here: a cell shows its interval, and the published leaderboard files keep their bytes.
LONG_COLUMNS = {
    **polars_schema("submission"), "name": pl.String, "model": pl.String, "team": pl.String,
    **polars_schema("track", "source", "config", "corruption", "family", "severity", "metric", "value", "lo", "hi",
                    "n", "stratum", "t", "note"),
    "frozen_threshold": pl.Float64,
    "dataset_version": pl.String, "dataset_digest": pl.String, "evaluator_version": pl.String,
    "reference": pl.Boolean,  # the submission was named with ``--reference`` (the default row)
    # verified (an attestation of this project matches it), self-reported, or published (numbers from a paper)
    "status": pl.String,
    # the source's clean label_match is at least LABEL_MATCH_FLAG: the predictions copy the published test labels
    "matches_test_labels": pl.Boolean,
    # the machine class the submission's model ran on (aegisbench.kernels.describe, from its provenance's
    # ``kernels``); null where none was recorded (predictions handed in, numbers from a paper). Portable
    # (x86-64-v3, oneDNN off, MKL COMPATIBLE, fixed threads): the same bytes on every x86-64 machine; else
    # (oneDNN on, a GPU) the rows may differ on another machine (aegisbench.leaderboard.machine)
    "kernels": pl.String,
}
_CORRUPTION_RANK = {c: i for i, c in enumerate(FAMILY_OF)}
_FAMILY_RANK = {f: i for i, f in enumerate(FAMILIES)}


def direction(metric: str) -> int | None:
    """+1 if higher is better, -1 if lower is better, None if the metric has no order or
    is not registered (the registry's :attr:`~aegisbench.metrics.MetricSpec.direction`)."""
    spec = REGISTRY.get(metric)
    return None if spec is None else spec.sign


def natural_key(text: str) -> tuple:
    """Sort key that orders embedded numbers numerically (``s2`` before ``s10``)."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t)


def condition_key(config: str, corruption: str | None, family: str | None, severity: int) -> tuple:
    """Clean first, then the corruptions family by family, severities ascending, then the rest."""
    if config == CLEAN:
        return (0, 0, 0, (), 0, ())
    known = corruption in _CORRUPTION_RANK
    return (1, _FAMILY_RANK.get(family, len(FAMILIES)), 0 if known else 1,
            (_CORRUPTION_RANK[corruption],) if known else natural_key(corruption or config),
            severity, natural_key(config))


def _threshold(prov: dict, source: str) -> float | None:
    thr = prov["frozen_threshold"]
    if isinstance(thr, dict):
        thr = thr.get(source)
    return None if thr is None else float(thr)


def long_table(entries: Sequence[ResultEntry], references: Collection[str] = (),
               statuses: Mapping[str, str] | None = None) -> pl.DataFrame:
    """All metric rows with their provenance, one row per (submission, source, config, metric).

    ``reference`` is true on the rows of the submissions named in ``references``; ``status``
    is the submission's in ``statuses`` (default ``self-reported``).
    """
    frames = []
    for entry in entries:
        prov = entry.provenance
        thr = {s: _threshold(prov, s) for s in entry.metrics["source"].unique().to_list()}
        frames.append(entry.metrics.with_columns(
            pl.lit(prov["name"]).alias("name"), pl.lit(prov["model"]).alias("model"),
            pl.lit(prov["team"]).alias("team"),
            pl.col("source").replace_strict(thr, return_dtype=pl.Float64).alias("frozen_threshold"),
            pl.lit(prov["dataset_version"]).alias("dataset_version"),
            pl.lit(prov["dataset_digest"]).alias("dataset_digest"),
            pl.lit(prov["evaluator_version"]).alias("evaluator_version"),
            pl.lit(entry.folder in set(references)).alias("reference"),
            pl.lit((statuses or {}).get(entry.folder, SELF_REPORTED)).alias("status"),
            pl.col("source").is_in(_copied_sources(entry.metrics)).alias("matches_test_labels"),
            pl.lit(recorded_kernels(prov, entry.folder), dtype=pl.String).alias("kernels"),
        ))
    if not frames:
        return pl.DataFrame(schema=LONG_COLUMNS)
    df = pl.concat([f.select([pl.col(c).cast(t) for c, t in LONG_COLUMNS.items()]) for f in frames])
    return _sort_conditions(df, ["track", "source", "submission"], ["metric", "stratum", "t"])


def _copied_sources(metrics: pl.DataFrame) -> list[str]:
    """The sources whose clean ``label_match`` reaches :data:`~aegisbench.metrics.declared.LABEL_MATCH_FLAG`."""
    hit = metrics.filter((pl.col("metric") == "label_match") & (pl.col("config") == CLEAN)
                         & (pl.col("value") >= LABEL_MATCH_FLAG))
    return sorted(set(hit["source"].to_list()))


def is_headline() -> pl.Expr:
    """True for the one cell per condition and metric: all frames pooled, stratum null or ``all``."""
    return pl.col("t").is_null() & (pl.col("stratum").is_null() | (pl.col("stratum") == "all"))


def headline(long: pl.DataFrame) -> pl.DataFrame:
    """The headline rows of a long table (see ``is_headline``)."""
    return long.filter(is_headline())


def _sort_conditions(df: pl.DataFrame, before: list[str], after: list[str]) -> pl.DataFrame:
    """Sort by ``before`` columns, then condition order, then ``after`` columns."""
    if df.height == 0:
        return df
    keys = [condition_key(*r) for r in df.select("config", "corruption", "family", "severity").iter_rows()]
    order = {k: i for i, k in enumerate(sorted(set(keys)))}
    return (df.with_columns(pl.Series("_cond", [order[k] for k in keys], dtype=pl.Int64))
            .sort([*before, "_cond", *after], maintain_order=True, nulls_last=False).drop("_cond"))


def conditions(long: pl.DataFrame, track: str, source: str) -> list[dict]:
    """The ordered conditions (config, corruption, family, severity) of one track and source."""
    rows = (long.filter((pl.col("track") == track) & (pl.col("source") == source))
            .select("config", "corruption", "family", "severity").unique().to_dicts())
    return sorted(rows, key=lambda r: condition_key(r["config"], r["corruption"], r["family"], r["severity"]))


def _ordered(metric_col: str = "metric") -> pl.Expr:
    """+1/-1/null direction of each row's metric (from the registry)."""
    signs = {s.name: s.sign for s in REGISTRY if s.sign is not None}
    return pl.col(metric_col).replace_strict(signs, default=None, return_dtype=pl.Int32).alias("direction")


def family_summary(long: pl.DataFrame) -> pl.DataFrame:
    """Mean/min/max over each family's corruptions, per severity and (severity null) over all.

    ``over`` lists the configs each row aggregates; ``worst_config`` is where the worst
    value of the group occurs (by the metric's direction; null for unordered metrics).
    """
    df = headline(long).filter(pl.col("family").is_not_null())
    keys = ["track", "source", "submission", "model", "metric", "family"]
    parts = []
    for by_sev in (True, False):
        group = [*keys, "severity"] if by_sev else keys
        agg = (df.filter(pl.col("value").is_not_null()).with_columns(_ordered())
               .sort(["config"]).group_by(group, maintain_order=False).agg(
                   pl.len().cast(pl.Int64).alias("n_conditions"),
                   pl.col("config").sort_by("config").str.join(",").alias("over"),
                   pl.col("value").mean().alias("mean"), pl.col("value").min().alias("min"),
                   pl.col("value").max().alias("max"),
                   pl.col("config").sort_by(pl.col("value") * pl.col("direction"), "config")
                   .first().alias("worst_config"),
                   pl.col("direction").first()))
        agg = agg.with_columns(pl.when(pl.col("direction").is_null()).then(None)
                               .otherwise(pl.col("worst_config")).alias("worst_config"))
        if not by_sev:
            agg = agg.with_columns(pl.lit(None, dtype=pl.Int64).alias("severity"))
        parts.append(agg.select(*keys, pl.col("severity").cast(pl.Int64), pl.lit("mean").alias("aggregate"),
                                "n_conditions", "over", "mean", "min", "max", "worst_config"))
    out = pl.concat(parts)
    return out.with_columns(pl.col("family").replace_strict(_FAMILY_RANK, default=99).alias("_f")).sort(
        "track", "source", "submission", "metric", "_f", "family", pl.col("severity"),
        nulls_last=True).drop("_f")


def _directed_groups(long: pl.DataFrame, key: str):
    """Headline rows with a value, grouped by (track, source, ``key``, metric), for the
    metrics that have a direction: yields (group key, sign, rows)."""
    df = headline(long).filter(pl.col("value").is_not_null())
    for keys, part in df.group_by("track", "source", key, "metric", maintain_order=False):
        sign = direction(keys[3])
        if sign is not None:
            yield keys, sign, part


def floor_view(long: pl.DataFrame) -> pl.DataFrame:
    """Per model, source and ordered metric: the worst condition (all ties listed in ``at``)."""
    rows = []
    for (track, source, sub, metric), sign, part in _directed_groups(long, "submission"):
        part = _sort_conditions(part, [], [])
        worst = part["value"].min() if sign > 0 else part["value"].max()
        at = part.filter(pl.col("value") == worst)
        clean = part.filter(pl.col("config") == CLEAN)["value"].to_list()
        rows.append({"track": track, "source": source, "submission": sub, "model": part["model"][0],
                     "team": part["team"][0], "metric": metric, "floor": worst,
                     "lo": at["lo"][0], "hi": at["hi"][0], "at": at["config"].to_list(),
                     CLEAN: clean[0] if clean else None, "n_conditions": part.height})
    schema = {"track": pl.String, "source": pl.String, "submission": pl.String, "model": pl.String,
              "team": pl.String, "metric": pl.String, "floor": pl.Float64, "lo": pl.Float64,
              "hi": pl.Float64, "at": pl.List(pl.String), CLEAN: pl.Float64, "n_conditions": pl.Int64}
    return pl.DataFrame(rows, schema=schema).sort("track", "source", "submission", "metric")


def relative_drop(long: pl.DataFrame) -> pl.DataFrame:
    """Each condition against the model's own clean value (same source and metric).

    ``drop`` is the degradation in the metric's own units (positive = worse, by the
    metric's direction); ``relative_drop`` is ``drop / |clean|`` (null when clean is 0).
    """
    keys = ["track", "source", "submission", "metric"]
    long = headline(long)
    clean = long.filter(pl.col("config") == CLEAN).select(*keys, pl.col("value").alias("clean_value"))
    df = (long.filter((pl.col("config") != CLEAN) & pl.col("value").is_not_null())
          .with_columns(_ordered()).filter(pl.col("direction").is_not_null())
          .join(clean, on=keys, how="inner").filter(pl.col("clean_value").is_not_null()))
    df = df.with_columns(((pl.col("clean_value") - pl.col("value")) * pl.col("direction")).alias("drop"))
    df = df.with_columns(pl.when(pl.col("clean_value") == 0).then(None)
                         .otherwise(pl.col("drop") / pl.col("clean_value").abs()).alias("relative_drop"))
    out = df.select("track", "source", "submission", "model", "config", "corruption", "family",
                    "severity", "metric", "clean_value", "value", "drop", "relative_drop")
    return _sort_conditions(out, ["track", "source", "submission"], ["metric"])


def tied_groups(items: Sequence[tuple], sign: int) -> list[list]:
    """Order ``(key, value, lo, hi)`` best first; overlapping intervals are one tied group.

    Groups are the connected components of the interval-overlap graph (closed intervals,
    so two degenerate [0, 0] intervals tie): any two models in different groups have
    disjoint intervals, so the order between groups is supported by the data.
    """
    spans = []
    for key, value, lo, hi in items:
        lo = value if lo is None else min(lo, value)
        hi = value if hi is None else max(hi, value)
        # mirror lower-is-better metrics so "larger is better" below
        spans.append((key, value * sign, *(sorted((lo * sign, hi * sign)))))
    spans.sort(key=lambda s: (-s[3], -s[1], str(s[0])))
    groups: list[list[tuple]] = []
    floor_lo = None
    for span in spans:
        if groups and span[3] >= floor_lo:
            groups[-1].append(span)
            floor_lo = min(floor_lo, span[2])
        else:
            groups.append([span])
            floor_lo = span[2]
    groups.sort(key=lambda g: -max(s[1] for s in g))
    return [[s[0] for s in sorted(g, key=lambda s: (-s[1], str(s[0])))] for g in groups]


def _status_groups(info: dict, sign: int) -> list[list]:
    """Tied groups of the verified rows, then of the self-reported ones (never above a verified
    row); published rows are not ranked against rows scored here."""
    out = []
    for status in (VERIFIED, SELF_REPORTED):
        part = [(k, r["value"], r["lo"], r["hi"]) for k, r in info.items() if r["status"] == status]
        out += tied_groups(part, sign)
    return out


def rank_view(long: pl.DataFrame) -> pl.DataFrame:
    """Rank within each (track, source, config, metric) only, as tied groups: verified rows
    first, self-reported rows after them (``status`` says which); published rows unranked.

    ``rank`` is competition style (1, 1, 3): one plus the number of models in better
    groups; ``group_size`` > 1 marks a tie. Rows with no value are not ranked.
    """
    rows = []
    for (track, source, config, metric), sign, part in _directed_groups(long, "config"):
        info = {r["submission"]: r for r in part.iter_rows(named=True)}
        groups = _status_groups(info, sign)
        better = 0
        for gi, group in enumerate(groups, start=1):
            for key in group:
                r = info[key]
                rows.append({"track": track, "source": source, "config": config, "metric": metric,
                             "submission": key, "model": r["model"], "value": r["value"], "lo": r["lo"],
                             "hi": r["hi"], "group": gi, "rank": better + 1, "group_size": len(group),
                             "corruption": r["corruption"], "family": r["family"],
                             "severity": r["severity"], "status": r["status"], "_pos": len(rows)})
            better += len(group)
    schema = {"track": pl.String, "source": pl.String, "config": pl.String, "metric": pl.String,
              "submission": pl.String, "model": pl.String, "value": pl.Float64, "lo": pl.Float64,
              "hi": pl.Float64, "group": pl.Int64, "rank": pl.Int64, "group_size": pl.Int64,
              "corruption": pl.String, "family": pl.String, "severity": pl.Int64, "status": pl.String}
    out = pl.DataFrame(rows, schema={**schema, "_pos": pl.Int64})
    # inside a condition, keep the order tied_groups gave (best group first, best value first)
    return _sort_conditions(out, ["track", "source"], ["metric", "_pos"]).select(*schema)


@dataclass(frozen=True)
class Board:
    """Everything the Markdown and the site are rendered from."""

    long: pl.DataFrame
    families: pl.DataFrame
    floors: pl.DataFrame
    drops: pl.DataFrame
    ranks: pl.DataFrame
    provenance: dict
    skipped: tuple[Skipped, ...]
    expect: Expectation
    attachments: dict  # submission -> {file name: bytes} (e.g. the evaluator's calibration.png)
    references: tuple[str, ...] = ()  # merged submissions marked as reference (listed first, the default row)
    test_images: tuple[tuple[str, int], ...] = ()  # (source, clean test images) of the dataset: a smoke test?
    statuses: dict = field(default_factory=dict)  # submission -> (status, reason or None)
    seeds: pl.DataFrame | None = None  # the references' training-seed tables (leaderboard.seeds); None: not given


def build_board(entries: Sequence[ResultEntry], skipped: Sequence[Skipped], expect: Expectation,
                references: Collection[str] = (), test_images: dict[str, int] | None = None,
                statuses: Mapping[str, tuple[str, str | None]] | None = None) -> Board:
    """Assemble the long table and all derived views (pure).

    ``references``: submission ids to mark as reference; ids not among ``entries`` are ignored
    here (the caller reports them). ``test_images``: clean test images per source of the
    dataset (the page says when it is a smoke test on tiny data). ``statuses``: per submission,
    ``(status, reason)`` (:func:`aegisbench.attestation.row_status`; default self-reported).
    """
    merged = {e.folder for e in entries}
    refs = tuple(sorted(set(references) & merged))
    statuses = {e.folder: tuple((statuses or {}).get(e.folder, (SELF_REPORTED, None))) for e in entries}
    long = long_table(entries, refs, {k: v[0] for k, v in statuses.items()})
    return Board(references=refs, long=long, families=family_summary(long), floors=floor_view(long),
                 drops=relative_drop(long), ranks=rank_view(long),
                 provenance={e.folder: dict(e.provenance) for e in sorted(entries, key=lambda e: e.folder)},
                 skipped=tuple(sorted(skipped, key=lambda s: s.folder)), expect=expect,
                 attachments={e.folder: dict(e.attachments) for e in entries if e.attachments},
                 test_images=tuple(sorted((test_images or {}).items())), statuses=statuses)
