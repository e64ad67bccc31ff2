"""``aegisbench serve``: the ASGI application (FastAPI) over one hosted project.

Public: the leaderboard page (``/`` and its files), ``/health``, the OpenAPI description
(``/openapi.json``, browsable at ``/docs``). Everything else needs a team's token: the JSON API
(:mod:`~aegisbench.service.api`) as ``Authorization: Bearer <token>``, the pages
(:mod:`~aegisbench.service.pages`) through a session cookie set by signing in with the token
(``HttpOnly``, ``SameSite=Strict``; the API's writes take the header only). A team sees only its
own submissions; another team's id answers 404, like an unknown one. The queue page is for admin
teams (``aegisbench team add NAME --admin``).

Every route is a thin layer over :mod:`~aegisbench.service.intake`,
:mod:`~aegisbench.service.status` and :mod:`~aegisbench.service.board`. Every refusal is
``{"error": "<one line>", "problems": [...]}`` with its status: 400 bad input, 401 token,
403 closed, 404 unknown, 413 too large (answered from the ``Content-Length`` header before the
body is read, or as soon as a body without one passes the limit), 429 over a limit.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse
from starlette.staticfiles import StaticFiles

import aegisbench
from aegisbench.service import api, pages
from aegisbench.service.intake import Host, Refusal
from aegisbench.service.web import BodyLimit, error_body, host_of


async def _http_error(request: Request, exc: HTTPException):
    return error_body(exc.status_code, str(exc.detail))


async def _invalid(request: Request, exc: RequestValidationError):
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(x) for x in first.get("loc", ()))
    return error_body(400, f"{where}: {first.get('msg', 'invalid request')}")


async def _refused(request: Request, exc: Refusal):
    return error_body(exc.status, exc.message, exc.problems)


def _index(request: Request):
    path = host_of(request).project.site / "index.html"
    if not path.is_file():
        return HTMLResponse("<!DOCTYPE html><title>AegisBench</title><p>The leaderboard is being built: start "
                            "a worker (<code>aegisbench worker</code>).</p>", status_code=503)
    return FileResponse(path, media_type="text/html")


def create_app(host: Host) -> FastAPI:
    """The application over ``host`` (its project, database runtime and dataset index)."""
    app = FastAPI(title="AegisBench submissions", version=aegisbench.__version__,
                  description="Submit predictions to a hosted AegisBench leaderboard and follow them. Every call "
                              "but /health and the leaderboard needs `Authorization: Bearer <team token>`.",
                  exception_handlers={HTTPException: _http_error, RequestValidationError: _invalid,
                                      Refusal: _refused})
    app.state.host = host
    app.add_middleware(BodyLimit, limit=host.rules.max_upload_bytes)
    app.include_router(api.router)
    app.include_router(pages.router)
    app.add_api_route("/", _index, methods=["GET"], include_in_schema=False)
    app.mount("/", StaticFiles(directory=host.project.site, html=True, check_dir=False), name="board")
    return app
