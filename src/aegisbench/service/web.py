"""What every route of the server shares: the project it serves, who is asking, the upload's
parts, the error body and the pages' renderer.

* A route finds its :class:`~aegisbench.service.intake.Host` on ``request.app.state.host``.
* :func:`bearer` (the API's writes): ``Authorization: Bearer <token>`` only, so a page a team has
  open in its browser cannot be made to write through the API; :func:`reader` (the API's reads)
  also takes the pages' session cookie; :func:`cookie_team` is the pages' sign-in.
* :class:`BodyLimit` answers 413 for an upload over ``max_upload_bytes`` from its
  ``Content-Length`` header alone, before the body is read, or as soon as the bytes received pass
  the limit (a chunked body).
* Every refusal is ``{"error": "<one line>", "problems": [...]}`` (:func:`error_body`).

>>> error_body(429, "over the limit").body
b'{"error":"over the limit","problems":["over the limit"]}'
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from aegisbench.errors import printable
from aegisbench.service.intake import Host, Refusal, accept_upload, precheck
from aegisbench.service.teams import Team, authenticate
from aegisbench.service.uploads import Part

COOKIE = "aegis_token"
UPLOAD_PATHS = ("/api/v1/submissions", "/team/submissions")
TEMPLATES = Path(__file__).parent / "templates"  # the server's own pages (the leaderboard's are the package's)
NO_TOKEN = "missing, wrong or revoked token: send `Authorization: Bearer <team token>`"
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                          undefined=jinja2.StrictUndefined)
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; style-src 'self'; script-src 'none'; "
                                           "form-action 'self'; frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def host_of(request: Request) -> Host:
    return request.app.state.host


def error_body(status: int, message: str, problems: list[str] | None = None) -> JSONResponse:
    message = printable(message)
    return JSONResponse({"error": message, "problems": [printable(p) for p in (problems or [message])]},
                        status_code=status)


class TooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"the upload is larger than the limit of {limit} bytes")


class BodyLimit:
    """ASGI middleware: see the module doc."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in UPLOAD_PATHS:
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            response = error_body(413, TooLarge(self.limit).detail)
            response.headers["connection"] = "close"
            return await response(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise TooLarge(self.limit)
            return message

        await self.app(scope, counted, send)


def bearer(request: Request) -> Team:
    header = request.headers.get("authorization", "")
    token = header[7:] if header[:7].lower() == "bearer " else None
    team = authenticate(host_of(request).runtime, token) if token else None
    if team is None:
        raise HTTPException(401, NO_TOKEN)
    return team


def reader(request: Request) -> Team:
    """The header, or (for reads) the page's session cookie."""
    if request.headers.get("authorization"):
        return bearer(request)
    team = cookie_team(request)
    if team is None:
        raise HTTPException(401, NO_TOKEN)
    return team


def cookie_team(request: Request) -> Team | None:
    return authenticate(host_of(request).runtime, request.cookies.get(COOKIE))


async def _parts(request: Request, max_files: int) -> tuple[list[Part], object]:
    try:
        form = await request.form(max_files=max_files, max_fields=max_files, max_part_size=1024 * 1024)
    except TooLarge:
        raise
    except HTTPException as exc:
        raise Refusal(400, f"malformed multipart form: {exc.detail}") from None
    except Exception as exc:  # noqa: BLE001 - any parser failure is the client's malformed body
        raise Refusal(400, f"malformed multipart form: {exc}") from None
    parts = []
    for key, value in form.multi_items():
        if isinstance(value, str):
            raise Refusal(400, f"form field {key[:80]!r} must be a file")
        if not value.filename and not value.size:
            continue  # a file input of the form left empty
        parts.append(Part(key, value.filename or "", value.file, value.size or 0))
    return parts, form


async def upload(request: Request, team: Team):
    """Phase and quota (403 / 429, before the body is read), then the parts, then
    :func:`~aegisbench.service.intake.accept_upload`."""
    host = host_of(request)
    await run_in_threadpool(precheck, host, team)
    parts, form = await _parts(request, host.rules.max_files)
    try:
        return await run_in_threadpool(accept_upload, host, team, parts)
    finally:
        await form.close()


def page(name: str, status: int = 200, team: Team | None = None, **ctx) -> HTMLResponse:
    """A page of the server from its template (autoescaped; no script runs on it)."""
    ctx = {"error": None, "notice": None, "problems": None, **ctx}
    html = _ENV.get_template(name).render(team=team.name if team else None, admin=bool(team and team.admin), **ctx)
    return HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
