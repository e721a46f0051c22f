"""The console's actions (POST): each writes one kind of command through the client, recording who asked.

Every action is checked first (:func:`checked`): a read-only console refuses it, and so does a
POST whose CSRF token is not the browser's cookie (403). Then it sends through
:class:`engine.client.Client` (or, for a tenant's weight, the tenants table's writer that
``epochq tenants set`` uses) and redirects to the page it came from.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from engine.console import params
from engine.console.got import get
from engine.console.reads import caught_up, job_record
from engine.console.security import CSRF_COOKIE, CSRF_FIELD, CSRF_HEADER, csrf_ok, requested_by
from engine.console.web import access_of, problem_page, reads_of
from engine.errors import NotFoundError, ValidationError

Action = Callable[[Request, FormData], Response]


def checked(action: Action) -> Callable[[Request], Awaitable[Response]]:
    """``action`` behind the read-only and CSRF checks, run on a worker thread (it waits for Kafka)."""
    async def endpoint(request: Request) -> Response:
        if access_of(request).read_only:
            return PlainTextResponse("this console is read-only: it takes no action", 403)
        form = await request.form()
        submitted = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)
        if not csrf_ok(request.cookies.get(CSRF_COOKIE), str(submitted) if submitted else None):
            return PlainTextResponse("refused: missing or wrong CSRF token (reload the page and try again)", 403)
        return await run_in_threadpool(_guarded, action, request, form)
    endpoint.__name__ = action.__name__
    return endpoint


def _guarded(action: Action, request: Request, form: FormData) -> Response:
    """The action's response, or a page saying in one line why it was not sent."""
    result = get(lambda: action(request, form))
    if result.value is not None:
        caught_up(reads_of(request).settings)  # the page it leads to shows what the action did
        return result.value
    return problem_page(request, 400, f"not sent: {result.problem}")


def who_asked(request: Request) -> str:
    """Who asked for an action, as its command records it (the login, or the console on this host)."""
    return requested_by(getattr(request.state, "user", ""))


def form_field(form: FormData, name: str) -> str:
    """A form field's text, trimmed; empty when it is missing."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def console_client(request: Request) -> Any:
    """A client on the console's settings (a context manager: it closes when the action is done)."""
    from engine.client import Client

    return Client(reads_of(request).settings)


def _to_job(job_id: str, flash: str) -> Response:
    return RedirectResponse(f"/jobs/{params.segment(job_id)}?flash={flash}", 303)


def path_id(request: Request, *shape: str | None) -> str:
    """The one id of the action's path, read from the path as sent (still encoded): ``y%2F..%2Fx`` is the
    job ``y/../x``, never ``x`` (:func:`params.path_ids`)."""
    raw = request.scope.get("raw_path") or request.scope["path"].encode("utf-8")
    return params.path_ids(raw, shape)[0]


def _job_id(request: Request, verb: str) -> str:
    return path_id(request, "actions", "jobs", None, verb)


def _job_record(request: Request, job_id: str) -> Any:
    found = job_record(reads_of(request).settings, job_id)
    if found is None:
        raise NotFoundError(f"no job {job_id} in this state directory's projections")
    return found[1]


def _tenant_of(request: Request, job_id: str) -> str:
    """The job's tenant (a command acts only within it): from the projections, else from its history in the log."""
    from engine.questions.history import job_history, owner_tenant

    reads = reads_of(request)
    found = job_record(reads.settings, job_id)
    if found is not None:
        return found[1].tenant_id
    problem = reads.probe.problem()
    if problem:
        raise NotFoundError(f"no job {job_id} in this state directory's projections, and its history cannot be "
                            f"read: {problem}")
    tenant = owner_tenant(job_history(reads.settings, job_id))
    if tenant is None:
        raise NotFoundError(f"no job {job_id}: not in this state directory's projections, nor in the log")
    return tenant


def cancel(request: Request, form: FormData) -> Response:
    """Cancel the job (a waiting one at once, a running one when its attempt stops)."""
    job_id = _job_id(request, "cancel")
    tenant = _tenant_of(request, job_id)
    with console_client(request) as client:
        handle = client.cancel(job_id, tenant=tenant, reason=form_field(form, "reason"),
                               requested_by=who_asked(request))
        return _answered(request, handle, "cancel", job_id)


def replay(request: Request, form: FormData) -> Response:
    """Replay one dead-lettered job with a fresh attempt count."""
    job_id = _job_id(request, "replay")
    job = _job_record(request, job_id)
    if job.state.value != "dead":
        raise ValidationError(f"job {job_id} is {job.state.value}, not dead: only a dead job is replayed")
    with console_client(request) as client:
        handle = client.replay(job_id, tenant=job.tenant_id, requested_by=who_asked(request),
                               reason=form_field(form, "reason") or "replayed from the console")
        return _answered(request, handle, "replay", job_id)


ANSWER_WAIT_S = 5.0
"""How long a job's action waits for the owner's answer (its first event after the command) before showing the job."""


def _answered(request: Request, handle: Any, verb: str, job_id: str) -> Response:
    """The job's page, or a page saying the owner refused the command (the job had moved on, say)."""
    answer = handle.wait(ANSWER_WAIT_S, until=lambda outcome: bool(outcome.events))
    if answer.refusal is not None:
        return problem_page(request, 409, f"{verb} of job {job_id} refused: {answer.refusal}")
    return _to_job(job_id, verb)


def reschedule(request: Request, form: FormData) -> Response:
    """Move a waiting job to another due time (``delay`` seconds from now); the owner's decision is shown."""
    job_id = _job_id(request, "reschedule")
    tenant = _tenant_of(request, job_id)
    delay = params.positive(form_field(form, "delay"), "delay", 60.0)
    with console_client(request) as client:
        receipt = client.reschedule(job_id, delay=delay, tenant=tenant,
                                    reason=_reason(form, request), wait=10.0)
    if receipt.accepted:
        return _to_job(job_id, "reschedule")
    why = receipt.reason or "no decision within 10 s (is an engine running?)"
    return problem_page(request, 409, f"reschedule of {job_id} {receipt.status}: {why}")


def _reason(form: FormData, request: Request) -> str:
    """The reason given, with who asked (commands without a ``requested_by`` field carry it in the reason)."""
    reason = form_field(form, "reason")
    return f"{reason} (by {who_asked(request)})" if reason else f"by {who_asked(request)}"


def pause_schedule(request: Request, form: FormData) -> Response:
    """Pause a schedule (a run in flight finishes)."""
    return _schedule_change(request, form, "pause")


def resume_schedule(request: Request, form: FormData) -> Response:
    """Resume a paused schedule from its next occurrence after now."""
    return _schedule_change(request, form, "resume")


def _schedule_change(request: Request, form: FormData, verb: str) -> Response:
    schedule_id = path_id(request, "actions", "schedules", None, verb)
    with console_client(request) as client:
        change = client.pause_schedule if verb == "pause" else client.resume_schedule
        receipt = change(schedule_id, reason=_reason(form, request))
    if receipt.status == "refused":
        return problem_page(request, 409, f"{verb} of schedule {schedule_id} refused: {receipt.reason}")
    return RedirectResponse(f"/schedules?flash={'paused' if verb == 'pause' else 'resumed'}", 303)


def set_weight(request: Request, form: FormData) -> Response:
    """Set a tenant's fair-share weight, keeping its queue limit, product and keys."""
    tenant = path_id(request, "actions", "tenants", None, "weight")
    weight = params.positive(form_field(form, "weight"), "weight", 0.0) if form_field(form, "weight") else None
    if weight is None:
        raise ValidationError("weight: give a number > 0", "weight")
    with console_client(request) as client:
        client.set_tenant_weight(tenant, weight)
    reads_of(request).cache.forget("tenants")
    return RedirectResponse("/tenants?flash=weight", 303)
