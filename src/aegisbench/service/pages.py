"""The server's own pages: a team's page (sign in with the token, upload, its submissions),
one submission's log and results, and the queue for admin teams. The leaderboard itself is
the static site the workers publish (served by :mod:`aegisbench.service.app`)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from aegisbench.errors import printable
from aegisbench.service import status as st
from aegisbench.service.intake import Refusal, retry, select_submission
from aegisbench.service.rules import day_window, utcnow
from aegisbench.service.teams import Team, authenticate
from aegisbench.service.web import COOKIE, TEMPLATES, cookie_team, host_of, page, upload

router = APIRouter(include_in_schema=False)
LOGIN = "serve_login.html.j2"


def team_page(request: Request, team: Team, status: int = 200, **ctx) -> HTMLResponse:
    host = host_of(request)
    now = utcnow()
    phase = host.rules.phase_at(now)
    rows = st.team_submissions(host, team)
    counted = [r for r in rows if r["phase"] == (phase.name if phase else None) and r["charged"]]
    start, end = day_window(now)
    today = [r for r in counted if r["uploaded_at"] >= start.strftime("%Y-%m-%dT%H:%M:%SZ")]
    return page("serve_team.html.j2", status, team, phase=phase, submissions=rows, used_today=len(today),
                used_total=len(counted), resets=end.strftime("%Y-%m-%d %H:%M UTC"),
                closed=host.rules.closed_reason(now), selectable=bool(phase and phase.standing == "selected"), **ctx)


@router.get("/team", response_class=HTMLResponse)
def team_home(request: Request, accepted: str | None = None):
    team = cookie_team(request)
    if team is None:
        return page(LOGIN)
    return team_page(request, team, notice=f"accepted: {accepted}, queued for scoring" if accepted else None)


@router.post("/team/login")
async def login(request: Request):
    form = await request.form(max_files=0, max_fields=2, max_part_size=1024)
    token = str(form.get("token") or "").strip()
    if authenticate(host_of(request).runtime, token) is None:
        return page(LOGIN, 401, error="wrong or revoked token")
    resp = RedirectResponse("/team", status_code=303)
    resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/")
    return resp


@router.post("/team/logout")
def logout():
    resp = RedirectResponse("/team", status_code=303)
    resp.delete_cookie(COOKIE, path="/")
    return resp


@router.post("/team/submissions")
async def upload_form(request: Request):
    team = cookie_team(request)
    if team is None:
        return page(LOGIN, 401, error="sign in with your team's token first")
    try:
        accepted = await upload(request, team)
    except Refusal as exc:
        return team_page(request, team, exc.status, error=printable(exc.message), problems=exc.problems)
    return RedirectResponse(f"/team?accepted={accepted.id}", status_code=303)


@router.post("/team/submissions/{sid}/select")
def select_form(sid: str, request: Request):
    team = cookie_team(request)
    if team is None or not select_submission(host_of(request), team.id, sid):
        raise HTTPException(404, f"no scored submission {sid[:80]!r} of this team")
    return RedirectResponse("/team", status_code=303)


@router.get("/team/submissions/{sid}", response_class=HTMLResponse)
def submission_page(sid: str, request: Request):
    host = host_of(request)
    team = cookie_team(request)
    if team is None:
        return page(LOGIN, 401)
    row = st.team_submission(host, team, sid)
    if row is None:
        raise HTTPException(404, f"no submission {sid[:80]!r} of team {team.name!r}")
    rows = st.headline(host, sid, row["track"]) if row["status"] == "scored" else []
    return page("serve_submission.html.j2", 200, team, s=row, rows=rows, events=st.submission_log(host, sid))


def admin(request: Request) -> Team:
    team = cookie_team(request)
    if team is None or not team.admin:
        raise HTTPException(403 if team else 401, "the queue page is for admin teams")
    return team


@router.get("/admin/queue", response_class=HTMLResponse)
def queue_page(request: Request):
    return page("serve_queue.html.j2", 200, admin(request), **st.queue_overview(host_of(request)))


@router.post("/admin/queue/{sid}/retry")
def retry_form(sid: str, request: Request):
    team = admin(request)
    if not retry(host_of(request), sid, f"by admin team {team.name}"):
        raise HTTPException(404, f"no submission {sid[:80]!r} that ended in a failure of ours")
    return RedirectResponse("/admin/queue", status_code=303)


@router.get("/static/serve.css")
def css():
    return Response((TEMPLATES / "serve_style.css.j2").read_text(encoding="utf-8"), media_type="text/css")
