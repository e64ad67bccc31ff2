"""The JSON API of the submission server (documented at ``/openapi.json``, browsable at ``/docs``)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse

from aegisbench.service import status as st
from aegisbench.service.intake import select_submission
from aegisbench.service.rules import utcnow
from aegisbench.service.teams import Team
from aegisbench.service.web import bearer, host_of, reader, upload

router = APIRouter()
_UPLOAD_SCHEMA = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["submission", "predictions"],
    "properties": {
        "submission": {"type": "string", "format": "binary", "description": "submission.yaml (its team is replaced "
                       "by the token's team)"},
        "predictions": {"type": "array", "items": {"type": "string", "format": "binary"},
                        "description": "one .parquet (predictions, or forecasts on the firespread track), one .zip "
                                       "(COCO <config>.json files or YOLO <config>/<split>/<image_id>.txt files), "
                                       "or COCO <config>.json files"},
        "warp_patch": {"type": "string", "format": "binary", "description": "warp_patch.parquet (smoke track)"},
        "warp_noise": {"type": "string", "format": "binary", "description": "warp_noise.parquet (smoke track)"}}}}}}}
_REFUSALS = {400: {"description": "refused: the validator's lines in `problems`"},
             401: {"description": "missing, wrong or revoked token"}, 403: {"description": "closed"},
             413: {"description": "too large"}, 429: {"description": "over a limit"}}


@router.get("/health", tags=["service"])
def health(request: Request):
    """Liveness, the database, the dataset and the phase open now."""
    host = host_of(request)
    phase = host.rules.phase_at(utcnow())
    overview = st.queue_overview(host)
    return {"status": "ok", "database": host.runtime.engine.dialect.name, "dataset_digest": host.index.digest,
            "dataset_version": host.index.version, "phase": phase.name if phase else None,
            "queue": overview["counts"], "revision": overview["revision"], "workers": overview["live_processes"]}


@router.get("/api/v1/limits", tags=["submissions"])
def limits(request: Request):
    """The rules a client should check before uploading."""
    reader(request)
    host = host_of(request)
    r = host.rules
    return {"max_upload_bytes": r.max_upload_bytes, "max_files": r.max_files, "max_zip_members": r.max_zip_members,
            "max_zip_ratio": r.max_zip_ratio, "max_expanded_bytes": r.max_expanded_bytes,
            "dataset_digest": host.index.digest,
            "phases": [{"name": p.name, "opens": p.opens and p.opens.isoformat(),
                        "closes": p.closes and p.closes.isoformat(), "daily_limit": p.daily_limit,
                        "total_limit": p.total_limit, "standing": p.standing} for p in r.phases]}


@router.post("/api/v1/submissions", status_code=201, tags=["submissions"], openapi_extra=_UPLOAD_SCHEMA,
             responses=_REFUSALS)
async def create_submission(request: Request):
    """Upload a submission (multipart): checked, stored under a new id, queued for scoring."""
    accepted = await upload(request, bearer(request))
    body = {"id": accepted.id, "status": accepted.status, "duplicate": accepted.duplicate}
    return JSONResponse(body, status_code=200 if accepted.duplicate else 201)


@router.get("/api/v1/submissions", tags=["submissions"])
def list_submissions(request: Request):
    """The team's submissions, newest first."""
    team = reader(request)
    return {"team": team.name, "submissions": st.team_submissions(host_of(request), team)}


def own(request: Request, sid: str) -> tuple[Team, dict]:
    """The asking team and its submission ``sid``; 404 for an unknown id or another team's."""
    team = reader(request)
    row = st.team_submission(host_of(request), team, sid)
    if row is None:
        raise HTTPException(404, f"no submission {sid[:80]!r} of team {team.name!r}")
    return team, row


@router.get("/api/v1/submissions/{sid}", tags=["submissions"])
def get_submission(sid: str, request: Request):
    """One submission's status."""
    return own(request, sid)[1]


@router.get("/api/v1/submissions/{sid}/log", tags=["submissions"])
def get_log(sid: str, request: Request):
    """One submission's log: upload, queue, every scoring run and its evaluator lines."""
    own(request, sid)
    return {"id": sid, "events": st.submission_log(host_of(request), sid)}


@router.get("/api/v1/submissions/{sid}/results", tags=["submissions"])
def get_results(sid: str, request: Request):
    """A scored submission's results: provenance and every metric row."""
    _, row = own(request, sid)
    res = st.results(host_of(request), sid) if row["status"] == "scored" else None
    if res is None:
        raise HTTPException(404, f"submission {sid} has no results (status {row['status']})")
    return res


@router.get("/api/v1/submissions/{sid}/row", tags=["submissions"])
def get_row(sid: str, request: Request):
    """The submission's row: per source and headline metric, clean and floor with interval."""
    _, row = own(request, sid)
    rows = st.headline(host_of(request), sid, row["track"]) if row["status"] == "scored" else []
    return {"id": sid, "status": row["status"], "standing": row["standing"], "rows": rows}


@router.post("/api/v1/submissions/{sid}/select", tags=["submissions"])
def select(sid: str, request: Request):
    """Make a scored submission the one that stands for the team's track."""
    team = bearer(request)
    if not select_submission(host_of(request), team.id, sid):
        raise HTTPException(404, f"no scored submission {sid[:80]!r} of team {team.name!r}")
    return {"id": sid, "selected": True}
