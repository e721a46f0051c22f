"""Rendering: the templates, their filters, and what every page is given (who asks, its CSRF token, read-only)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from engine.console.params import segment
from engine.console.reads import Reads
from engine.console.security import CSRF_COOKIE, ConsoleAccess

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def iso_us(us: int | None, zone: str = "UTC") -> str:
    """A time in µs as ``YYYY-MM-DD HH:MM:SS.mmm`` in ``zone`` (UTC by default, with its name); "" for none."""
    if us is None:
        return ""
    try:
        when = datetime.fromtimestamp(us / 1e6, UTC).astimezone(ZoneInfo(zone))
    except (OverflowError, ValueError, OSError):
        return f"{us} µs"
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d} {when.tzname()}"


def ago(us: int | None, now_s: float | None = None) -> str:
    """How long ago a time in µs was, roughly (``12 s ago``, ``3 min ago``, ``in 5 s``)."""
    if us is None:
        return ""
    from time import time

    delta = (now_s if now_s is not None else time()) - us / 1e6
    later, delta = delta < 0, abs(delta)
    text = f"{delta:.0f} s" if delta < 120 else f"{delta / 60:.0f} min" if delta < 7200 else f"{delta / 3600:.0f} h"
    return f"in {text}" if later else f"{text} ago"


FLASHES = {
    "cancel": "Cancel sent: a waiting job is cancelled at once, a running one when its attempt stops.",
    "replay": "Replay sent: the job goes back to its queue with a fresh attempt count.",
    "reschedule": "Reschedule accepted: the job waits for its new due time.",
    "paused": "Schedule paused.",
    "resumed": "Schedule resumed: it fires from its next occurrence after now.",
    "task-paused": "Task type paused in every partition: its queued jobs wait, running ones finish.",
    "task-resumed": "Task type resumed: its jobs start again.",
    "limit-set": "Rate limit set: each partition starts its share of the rate.",
    "limit-cleared": "Rate limit cleared.",
    "weight": "Weight written to the tenants table: engines apply it as they read the table.",
}
"""What a page says after an action redirected to it (``?flash=cancel``): fixed lines, never text from the URL."""

templates.env.filters["ts"] = iso_us
templates.env.filters["ago"] = ago
templates.env.filters["seg"] = segment


def compile_templates() -> None:
    """Compile every template now (an engine freezes what exists before it runs: observe/gctuning.py)."""
    for name in templates.env.list_templates():
        templates.get_template(name)


def reads_of(request: Request) -> Reads:
    """The console's reader."""
    reads: Reads = request.app.state.reads
    return reads


def access_of(request: Request) -> ConsoleAccess:
    """The console's security settings."""
    access: ConsoleAccess = request.app.state.access
    return access


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """A page: ``name`` with ``context`` and what every page is given."""
    access = access_of(request)
    common = {"read_only": access.read_only, "csrf": csrf_of(request), "user": getattr(request.state, "user", ""),
              "notice": reads_of(request).state_notice(), "namespace": reads_of(request).settings.namespace,
              "flash": FLASHES.get(request.query_params.get("flash", ""), "")}
    return templates.TemplateResponse(request, name, {**common, **context}, status_code=status)


def csrf_of(request: Request) -> str:
    """The browser's CSRF token: its cookie, or the one the middleware is about to set."""
    return getattr(request.state, "csrf", None) or request.cookies.get(CSRF_COOKIE, "")


def problem_page(request: Request, status: int, line: str) -> Response:
    """A page that says, in one line, why there is nothing to show."""
    return render(request, "problem.html", {"title": "Not found" if status == 404 else "Error", "line": line}, status)
