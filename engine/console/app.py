"""The console's ASGI application: routes, the access check, CSRF cookies, security headers, error pages."""

from __future__ import annotations

import logging
import os
import traceback

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from engine.config import Settings
from engine.console import actions, deadletters, jobpage, jobslist, pages, tasktypes
from engine.console.reads import LogProbe, Reads
from engine.console.security import CSRF_COOKIE, ConsoleAccess, caller, host_ok, new_csrf_token
from engine.console.web import HERE, problem_page

log = logging.getLogger("epochq.console")

SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class AccessMiddleware(BaseHTTPMiddleware):
    """Asks for the token (basic auth or bearer) when one is set, hands out the CSRF cookie, sets the headers."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        access: ConsoleAccess = request.app.state.access
        if not host_ok(request.headers.get("host"), access.token):
            return PlainTextResponse("refused: this console answers to 127.0.0.1 or localhost only "
                                     "(give it a --token to serve other names)", 403)
        user = caller(request.headers.get("authorization"), access.token)
        if user is None:
            return PlainTextResponse("the console needs its token: give it as the password (any user name)", 401,
                                     {"www-authenticate": 'Basic realm="epochq console", charset="UTF-8"'})
        request.state.user = user
        fresh = None if request.cookies.get(CSRF_COOKIE) else new_csrf_token()
        request.state.csrf = fresh
        response = await call_next(request)
        if fresh is not None:
            response.set_cookie(CSRF_COOKIE, fresh, httponly=True, samesite="strict", path="/")
        response.headers.update(SECURITY_HEADERS)
        return response


def _routes() -> list[Route | Mount]:
    gets = [("/", pages.overview_page), ("/overview/live", pages.overview_live), ("/jobs", jobslist.jobs_page),
            ("/jobs-live", jobslist.jobs_live),
            ("/jobs/{job_id:path}", jobpage.job_page), ("/live/jobs/{job_id:path}", jobpage.job_live),
            ("/dlq", deadletters.dlq_page), ("/dlq/live", deadletters.dlq_live), ("/schedules", pages.schedules_page),
            ("/tasks", tasktypes.tasks_page),
            ("/tenants", pages.tenants_page), ("/workers", pages.workers_page), ("/lateness", pages.lateness_page)]
    # An id may hold "/" (sent as %2F): the routes take any path, each action reads its id from the raw path.
    posts = [("/actions/jobs/{job_id:path}/cancel", actions.cancel),
             ("/actions/jobs/{job_id:path}/replay", actions.replay),
             ("/actions/jobs/{job_id:path}/reschedule", actions.reschedule),
             ("/actions/dlq/replay", deadletters.replay_filtered), ("/actions/dlq/purge", deadletters.purge_filtered),
             ("/actions/schedules/{schedule_id:path}/pause", actions.pause_schedule),
             ("/actions/schedules/{schedule_id:path}/resume", actions.resume_schedule),
             ("/actions/tenants/{tenant:path}/weight", actions.set_weight),
             ("/actions/tasks/{task_type:path}/pause", tasktypes.pause),
             ("/actions/tasks/{task_type:path}/resume", tasktypes.resume),
             ("/actions/tasks/{task_type:path}/limit", tasktypes.set_limit),
             ("/actions/tasks/{task_type:path}/unlimit", tasktypes.clear_limit)]
    return [Route("/healthz", lambda _: PlainTextResponse("ok")),
            *(Route(path, fn, methods=["GET"]) for path, fn in gets),
            *(Route(path, actions.checked(fn), methods=["POST"]) for path, fn in posts),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]


async def _not_found(request: Request, exc: Exception) -> Response:
    return problem_page(request, 404, f"no page at {request.url.path}")


async def _internal(request: Request, exc: Exception) -> Response:
    """A bug: one line on the page, the traceback in the log only when EPOCHQ_TRACEBACK=1."""
    if os.environ.get("EPOCHQ_TRACEBACK") == "1":
        log.error("console: %s", "".join(traceback.format_exception(exc)))
    line = f"internal error: {type(exc).__name__}: {exc} (EPOCHQ_TRACEBACK=1 logs where)"
    return PlainTextResponse(line, 500)


def create_app(settings: Settings, access: ConsoleAccess | None = None) -> Starlette:
    """The console for the projections of ``settings.state_dir`` and the log of ``settings``."""
    app = Starlette(routes=_routes(), middleware=[Middleware(AccessMiddleware)],
                    exception_handlers={404: _not_found, 500: _internal})
    app.state.access = access or ConsoleAccess()
    app.state.reads = Reads(settings, LogProbe(settings))
    return app
