"""The task types page: each task type's jobs per status, whether it is paused, its rate limit and its breaker;
pause/resume and set/clear a rate limit as actions (commands to every partition, recording who asked)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from engine.console import params
from engine.console.actions import console_client, form_field, path_id, who_asked
from engine.console.got import get
from engine.console.reads import holdups_now, task_types
from engine.console.web import problem_page, reads_of, render
from engine.questions.tally import tally
from engine.errors import ValidationError


@dataclass
class TaskTypeRow:
    """What the page shows of one task type."""

    task_type: str
    counts: dict[str, int] = field(default_factory=dict)
    paused: list[Any] = field(default_factory=list)  # PauseRecord per partition where it is paused
    limits: list[Any] = field(default_factory=list)  # LimitRecord per partition where it is limited
    breaker: Any = None  # the newest BreakerRecord, if any

    @property
    def rate(self) -> float:
        """The rate limit as set (starts/s across every partition; each partition starts its share)."""
        return max((float(limit.bucket.rate) for limit in self.limits), default=0.0)


def task_type_rows(counts: dict[str, dict[str, int]], holdups: Any) -> list[TaskTypeRow]:
    """One row per task type the catalog counted or a pause, limit or breaker names, by task type."""
    rows: dict[str, TaskTypeRow] = {t: TaskTypeRow(t, dict(c)) for t, c in counts.items()}
    for _, pause in holdups.paused:
        rows.setdefault(pause.task_type, TaskTypeRow(pause.task_type)).paused.append(pause)
    for _, limit in holdups.limited:
        rows.setdefault(limit.task_type, TaskTypeRow(limit.task_type)).limits.append(limit)
    for breaker in holdups.breakers:
        rows.setdefault(breaker.task_type, TaskTypeRow(breaker.task_type)).breaker = breaker
    return [rows[t] for t in sorted(rows)]


def tasks_page(request: Request) -> Response:
    """Task types: counts, pauses, rate limits, breakers, and the controls."""
    settings = reads_of(request).settings
    counts = get(lambda: task_types(settings))
    holdups = get(lambda: holdups_now(settings))
    rows = task_type_rows(counts.value or {}, holdups.value) if holdups.value is not None else \
        [TaskTypeRow(t, dict(c)) for t, c in (counts.value or {}).items()]
    return render(request, "tasks.html", {"page": "tasks", "counts": counts, "holdups": holdups, "rows": rows,
                                          "partitions": len(holdups.value.partitions) if holdups.value else 0})


def _done(request: Request, verb: str, task_type: str, outcomes: list[Any], changed: str) -> Response:
    """Back to the page, or a page saying what partitions refused, or that none decided."""
    verdict = tally(outcomes)
    if verdict.refused is not None:
        return problem_page(request, 403, f"{verb} of task type {task_type}: {verdict.refused}")
    if verdict.undecided == verdict.total:
        return problem_page(request, 409, f"{verb} of task type {task_type}: no partition decided within 10 s "
                                          "(is an engine running?)")
    return RedirectResponse(f"/tasks?flash={changed}#task-{params.segment(task_type)}", 303)


def pause(request: Request, form: FormData) -> Response:
    """Pause a task type in every partition (queued jobs wait, running ones finish)."""
    task_type = path_id(request, "actions", "tasks", None, "pause")
    with console_client(request) as client:
        outcomes = client.pause_task_type(task_type, reason=form_field(form, "reason"), requested_by=who_asked(request))
    return _done(request, "pause", task_type, outcomes, "task-paused")


def resume(request: Request, form: FormData) -> Response:
    """Resume a paused task type in every partition."""
    task_type = path_id(request, "actions", "tasks", None, "resume")
    with console_client(request) as client:
        outcomes = client.resume_task_type(task_type, reason=form_field(form, "reason"),
                                           requested_by=who_asked(request))
    return _done(request, "resume", task_type, outcomes, "task-resumed")


def set_limit(request: Request, form: FormData) -> Response:
    """Limit a task type's starts to ``rate`` a second (``burst`` at once) across the partitions."""
    task_type = path_id(request, "actions", "tasks", None, "limit")
    rate = form_field(form, "rate")  # the client parses it ("5", "30/m"), before it sends anything
    if not rate:
        raise ValidationError("rate: give starts a second, e.g. 5 or 30/m", "rate")
    burst = int(params.positive(form_field(form, "burst"), "burst", 1.0))
    with console_client(request) as client:
        outcomes = client.set_rate_limit(task_type, rate, burst=burst, reason=form_field(form, "reason"),
                                         requested_by=who_asked(request))
    return _done(request, "rate limit", task_type, outcomes, "limit-set")


def clear_limit(request: Request, form: FormData) -> Response:
    """Remove a task type's rate limit in every partition."""
    task_type = path_id(request, "actions", "tasks", None, "unlimit")
    with console_client(request) as client:
        outcomes = client.clear_rate_limit(task_type, reason=form_field(form, "reason"),
                                           requested_by=who_asked(request))
    return _done(request, "clear rate limit", task_type, outcomes, "limit-cleared")
