"""What a team (or an admin) may read back: its submissions, one submission's log and
results, the queue. Plain dicts, shared by the JSON API, the pages and ``aegisbench submit``.

A team reads only its own rows: every query here is scoped by the team's id, and an id of
another team answers exactly like an unknown one.

>>> fmt(0.51234, 0.4, 0.6)
'0.512 [0.400, 0.600]'
>>> fmt(None)
'n/a'
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math

import polars as pl
from sqlalchemy import desc, func, select

from aegisbench.leaderboard.tables import slug
from aegisbench.service.db import FINAL, aware, events, submissions, teams
from aegisbench.service.teams import Team

#: the metrics `submit --wait` and the submission page show per source (fire spread: our pooled ECE
#: and, beside it, ``ece_seed003``, seed 003's per-map ECE, as the leaderboard shows them)
HEADLINE = {"sar": ("recall", "precision", "f1"), "smoke": ("recall", "precision", "f1"),
            "firespread": ("f1", "brier", "ece", "ece_seed003")}
ROW_FIELDS = ("id", "phase", "track", "name", "model", "form", "size_bytes", "status", "charged", "message",
              "attempts", "content_sha256", "dataset_digest", "evaluator_version", "revision", "selected")


def fmt(value, lo=None, hi=None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    text = f"{value:.3f}"
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{lo:.3f}, {hi:.3f}]"
    return text


def _iso(moment) -> str | None:
    return None if moment is None else aware(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def standing_ids(host) -> set[str]:
    """The hosted ids on the board now (the last ledger revision's standing)."""
    from aegisbench.service.board import read_ledger
    ledger = read_ledger(host.project)
    return set(ledger[-1]["standing"]) if ledger else set()


def as_dict(row, standing: set[str]) -> dict:
    out = {k: getattr(row, k) for k in ROW_FIELDS}
    out.update(uploaded_at=_iso(row.uploaded_at), scored_at=_iso(row.scored_at), standing=row.id in standing,
               page=f"models/{slug(row.id)}.html", final=row.status in FINAL)
    return out


def team_submissions(host, team: Team) -> list[dict]:
    """The team's submissions, newest first."""
    standing = standing_ids(host)
    with host.runtime.engine.connect() as conn:
        rows = conn.execute(select(submissions).where(submissions.c.team_id == team.id)
                            .order_by(desc(submissions.c.uploaded_at), desc(submissions.c.id))).all()
    return [as_dict(r, standing) for r in rows]


def team_submission(host, team: Team, sid: str) -> dict | None:
    """One of the team's submissions (None: unknown, or another team's)."""
    with host.runtime.engine.connect() as conn:
        row = conn.execute(select(submissions).where(submissions.c.id == sid,
                                                     submissions.c.team_id == team.id)).first()
    return None if row is None else as_dict(row, standing_ids(host))


def submission_log(host, sid: str) -> list[dict]:
    with host.runtime.engine.connect() as conn:
        rows = conn.execute(select(events).where(events.c.submission_id == sid).order_by(events.c.id)).all()
    return [{"at": _iso(r.at), "kind": r.kind, "text": r.text} for r in rows]


def results(host, sid: str) -> dict | None:
    """The evaluator's output of a scored submission: provenance and every metric row."""
    folder = host.project.hosted_results / sid
    if not (folder / "metrics.parquet").is_file():
        return None
    prov = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
    df = pl.read_parquet(io.BytesIO((folder / "metrics.parquet").read_bytes()))
    rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in df.iter_rows(named=True)]
    keep = ("submission", "track", "dataset_version", "dataset_digest", "evaluator_version", "frozen_threshold",
            "evaluation")
    return {"provenance": {k: prov[k] for k in keep if k in prov}, "metrics": rows}


def headline(host, sid: str, track: str) -> list[dict]:
    """Per source and headline metric: the clean value and the floor with its interval, from the
    board's floor view (computed from the results when the submission does not stand)."""
    path = host.project.leaderboard / "views" / "floor.parquet"
    wanted = HEADLINE.get(track, ())
    df = pl.read_parquet(io.BytesIO(path.read_bytes())) if path.is_file() else None
    if df is None or sid not in set(df["submission"].to_list()):
        return _headline_from_results(host, sid, wanted)
    df = df.filter((pl.col("submission") == sid) & pl.col("metric").is_in(list(wanted)))
    out = []
    for r in df.sort("source", "metric").iter_rows(named=True):
        out.append({"source": r["source"], "metric": r["metric"], "clean": r["clean"], "floor": r["floor"],
                    "lo": r["lo"], "hi": r["hi"], "at": list(r["at"] or []), "clean_text": fmt(r["clean"]),
                    "floor_text": fmt(r["floor"], r["lo"], r["hi"])})
    return out


def _headline_from_results(host, sid: str, wanted) -> list[dict]:
    from aegisbench.leaderboard.aggregate import direction
    res = results(host, sid)
    if res is None:
        return []
    df = pl.DataFrame(res["metrics"], infer_schema_length=None)
    df = df.filter(pl.col("metric").is_in(list(wanted)) & pl.col("t").is_null()
                   & (pl.col("stratum").is_null() | (pl.col("stratum") == "all")))
    out = []
    for (source, metric), g in sorted(df.group_by(["source", "metric"]), key=lambda kv: kv[0]):
        sign = direction(metric) or 1
        vals = g.filter(pl.col("value").is_not_null())
        clean = g.filter(pl.col("config") == "clean")["value"].to_list()
        if not vals.height:
            continue
        worst = vals.sort("value", descending=sign < 0).row(0, named=True)
        out.append({"source": source, "metric": metric, "clean": clean[0] if clean else None, "floor": worst["value"],
                    "lo": worst["lo"], "hi": worst["hi"], "at": [worst["config"]],
                    "clean_text": fmt(clean[0] if clean else None), "floor_text": fmt(worst["value"], worst["lo"],
                                                                                    worst["hi"])})
    return out


def queue_overview(host) -> dict:
    """Counts per status, the queue's processes, and the rows an admin watches."""
    from firm.queue import schema as qs
    from aegisbench.service.board import read_ledger
    with host.runtime.engine.connect() as conn:
        counts = dict(conn.execute(select(submissions.c.status, func.count()).group_by(submissions.c.status)).all())
        open_rows = conn.execute(select(submissions, teams.c.name.label("team"))
                                 .join(teams, teams.c.id == submissions.c.team_id)
                                 .where(submissions.c.status.not_in(FINAL))
                                 .order_by(desc(submissions.c.uploaded_at))).all()
        recent = conn.execute(select(submissions, teams.c.name.label("team"))
                              .join(teams, teams.c.id == submissions.c.team_id)
                              .where(submissions.c.status.in_(FINAL))
                              .order_by(desc(submissions.c.uploaded_at)).limit(100)).all()
        procs = conn.execute(select(qs.processes).order_by(qs.processes.c.id)).all()
    rows = [{"id": r.id, "team": r.team, "uploaded_at": _iso(r.uploaded_at), "status": r.status,
             "attempts": r.attempts, "runner": r.runner, "message": r.message} for r in [*open_rows, *recent]]
    processes = [{"kind": p.kind, "name": p.name, "hostname": p.hostname, "pid": p.pid,
                  "last_heartbeat_at": _iso(p.last_heartbeat_at)} for p in procs]
    ledger = read_ledger(host.project)
    from firm._core.clock import now_utc
    alive = now_utc() - dt.timedelta(seconds=host.rules.lease_seconds)
    return {"counts": {s: counts.get(s, 0) for s in ("queued", "running", "scored", "failed", "error")},
            "rows": rows, "processes": processes, "revision": len(ledger),
            "live_processes": sum(1 for p in procs if p.last_heartbeat_at >= alive)}
