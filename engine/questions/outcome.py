"""A job's outcome as the log tells it: the fold of its events that clients show (status, result, error).

Only the job's own lifecycle sets its outcome fields (status, result, error, reason, attempts), and only
as the owner's fold does: an event whose epoch does not count is fenced (``engine.domain.fence``), and an
event the job's lifecycle forbids where the job stands (a ``JobSucceeded`` for a queued job, a
``JobCancelled`` after it completed: a forged record, by anyone with WRITE on the log) is ignored and
counted (``ignored``), never shown as the job's status or result. So a reader and the owner never disagree.
A ``CommandRefused`` answers one command about the job, whoever sent it (another tenant's
cancel, a late reschedule): it is in the job's history and in ``refusal`` for the command's
waiter, never in what ``status`` says the job is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine.contract import messages as m
from engine.domain.jobs import lifecycle_after
from engine.domain.lifecycle import JobState
from engine.errors import InvalidTransitionError
from engine.questions.logged import LoggedEvent

FINAL = {"completed", "dead", "cancelled", "rejected", "partial"}
STATUS_OF = {
    "JobSubmitted": "accepted", "JobScheduled": "scheduled", "JobQueued": "queued",
    "JobStarted": "running", "JobSucceeded": "completed", "JobFailed": "failed",
    "JobRetryScheduled": "retrying", "JobDeadLettered": "dead", "JobCancelled": "cancelled",
    "JobReplayed": "queued", "JobRequeued": "queued", "JobRejected": "rejected",
    "JobFannedOut": "running", "JobRescheduled": "scheduled", "JobCancelRequested": "cancelling",
    "TaskTypePaused": "paused", "TaskTypeResumed": "resumed",  # the envelope of a task type's pause in a partition
    "RateLimitSet": "limited", "RateLimitCleared": "unlimited",  # the envelope of a task type's rate limit
    "DependenciesAwaited": "waiting",
}


@dataclass
class Outcome:
    """What the log says about a job: its status, and result or error when it has one."""

    job_id: str
    status: str = "submitted"
    result: Any = None
    error: str | None = None
    reason: str | None = None
    attempts: int = 0  # counted toward max_attempts: the attempts started but those re-queued (never above it)
    requeues: int = 0  # attempts given up by a re-queue (owner stopped, hand-over, owner lost) since the last replay
    requeued_why: str | None = None  # the latest re-queue's reason (JobRequeued.reason)
    duplicate: bool = False  # the submit awaited (``command_id``) made no job: its key's job existed already
    progress: tuple[float | None, str] | None = None  # the running attempt's latest report: (value, message)
    pool: str | None = None  # the remote pool the latest attempt was dispatched to (JobStarted.pool, v7; None: not one)
    due_at: int | None = None  # µs, UTC: when a scheduled or retry-waiting job is due (the latest due time set)
    events: list[LoggedEvent] = field(default_factory=list)
    children: dict[str, dict[str, str]] = field(default_factory=dict)  # scoped jobs: tenant -> job_id, status, error
    task_type: str | None = None  # from the job's JobSubmitted (or JobRejected)
    held: str | None = None  # while queued: what a waiter knows holds it (an open breaker, a pause); set by a wait
    refusal: str | None = None  # the latest CommandRefused read: a command's answer for its waiter, not the job's
    dependencies: dict[str, str] = field(default_factory=dict)  # what it waits for: job id -> status (pending, …)
    dependents: list[str] = field(default_factory=list)  # the jobs that wait for it
    command_id: str | None = None  # the submit a waiter awaits: only its own DuplicateSubmitted makes a duplicate
    ignored: int = 0  # events of the job its lifecycle forbids where it stood: the owner's fold ignores them too
    _state: JobState | None = field(default=None, repr=False, compare=False)  # the lifecycle's, as the owner folds
    _known: bool = field(default=False, repr=False, compare=False)  # read from the job's submission on

    @property
    def known(self) -> bool:
        """Whether any event of the job was read (an id with none is unknown, or not decided yet)."""
        return bool(self.events)

    @property
    def done(self) -> bool:
        """Whether the job reached a final state (completed, dead, cancelled, rejected)."""
        return self.status in FINAL

    def apply(self, logged: LoggedEvent) -> None:
        """Take one event of the job into account (fenced events change nothing)."""
        self.events.append(logged)
        if logged.fenced or not self._allowed(logged.event.body):
            return
        body = logged.event.body
        if isinstance(body, m.CommandRefused):  # a command's answer: the job's own fields stay as they are
            self.refusal = f"{body.command} refused in state {body.state}: {body.reason}"
            return
        self.status = STATUS_OF.get(type(body).__name__, self.status)
        _details(self, body)

    def _allowed(self, body: m.EventBody) -> bool:
        """Whether the job's lifecycle takes ``body`` where the job stands (counted in ``ignored`` when not)."""
        try:
            after = lifecycle_after(self._state, body, self._known)
        except InvalidTransitionError:
            self.ignored += 1
            return False
        self._state, self._known = after, self._known or isinstance(body, m.JobSubmitted)
        return True


def _details(outcome: Outcome, body: m.EventBody) -> None:
    if isinstance(body, m.JobSubmitted):
        outcome.task_type = body.task_type
        outcome.dependencies = dict.fromkeys(body.depends_on, "pending")
    elif isinstance(body, m.DependencyReported):
        outcome.dependencies[body.dependency_job_id] = body.status
    elif isinstance(body, m.DependentAdded):
        outcome.dependents.append(body.dependent_job_id)
    elif isinstance(body, m.JobSucceeded):
        outcome.result = _decode_result(body.result)
    elif isinstance(body, m.JobFailed):
        outcome.error = f"{body.error_type}: {body.message}"
    elif isinstance(body, (m.JobScheduled, m.JobRetryScheduled, m.JobRescheduled)):
        outcome.due_at = body.due_at
    elif isinstance(body, m.JobStarted):
        outcome.attempts, outcome.progress, outcome.pool = body.attempt - outcome.requeues, None, body.pool or None
    elif isinstance(body, m.JobRequeued):
        outcome.requeues += 1
        outcome.attempts = max(0, outcome.attempts - 1)
        outcome.requeued_why = body.reason or "owner changed"  # a record written before v6 does not say
    elif isinstance(body, m.JobReplayed):
        outcome.requeues = 0
    elif isinstance(body, m.JobProgressed):
        outcome.progress = (body.value, body.message)
    elif isinstance(body, m.JobRejected):
        outcome.reason, outcome.error, outcome.task_type = body.reason, body.detail, body.task_type or None
    elif isinstance(body, m.JobDeadLettered):
        outcome.reason = body.reason
    elif isinstance(body, m.DuplicateSubmitted):  # another submit with the job's key: that submit's, not the job's
        outcome.duplicate = outcome.duplicate or (outcome.command_id is not None and
                                                  body.command_id == outcome.command_id)
    elif isinstance(body, m.JobFannedOut):
        outcome.children = {t: {"job_id": c, "status": "pending", "error": ""} for t, c in body.children.items()}
    elif isinstance(body, m.ChildReported):
        outcome.children[body.child_tenant] = {"job_id": body.child_job_id, "status": body.status, "error": body.error}
    elif isinstance(body, m.JobSettled):
        outcome.status = "completed" if body.outcome == "completed" else "partial"
        outcome.reason = f"{body.succeeded} succeeded, {body.failed} failed"
    elif isinstance(body, m.JobCancelled):
        outcome.reason = body.reason or None
    elif isinstance(body, m.JobCancelRequested):
        outcome.reason = f"cancel requested{': ' + body.reason if body.reason else ''}"


def _decode_result(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw


