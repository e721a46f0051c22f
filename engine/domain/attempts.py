"""A job's attempts: when it is queued, started, finished, retried, re-queued after a failover or a hand-back. Pure.

Only the attempts a handler failed (or that timed out) count toward ``max_attempts``: an attempt given up by a
re-queue (``JobRequeued``: its owner stopped, handed the partition over, or was lost) does not
(``JobView.counted_attempts``). The attempt *number* a handler sees still grows with every start, so each
start stays distinct (idempotency keys, fencing tokens, late results)."""

from __future__ import annotations

from collections.abc import Callable

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.inputs import (
    AttemptFinished, DecideContext, Emit, HandBack, ProgressReported, RequeueOrphan, RequeueReason, StartAttempt,
    TimerFired,
)
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from engine.domain.retry import backoff_us, lost_too_often, should_retry

LOST_REPEATEDLY = "owner_lost_repeatedly"
"""The dead-letter reason of a job whose engine died more than ``max_lost`` times while running it."""
LOST_ERROR = "OwnerLost"
"""The error type recorded for the attempt that was lost once too often."""


def timer_fired(given: TimerFired, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """A waiting job whose due time has come is queued (a stale timer changes nothing)."""
    if job is None or job.state not in (JobState.SCHEDULED, JobState.RETRYING):
        return []
    if job.due_at is not None and job.due_at > ctx.now:
        return []
    cause = "due" if job.state is JobState.SCHEDULED else "retry_due"
    return [Emit(job.job_id, job.tenant_id, m.JobQueued(cause))]


def start(given: StartAttempt, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """A queued job takes a free slot: its next attempt starts."""
    if job is None or job.state is not JobState.QUEUED:
        return []
    due = job.due_at if job.due_at is not None else job.submitted_at
    return [Emit(job.job_id, job.tenant_id, m.JobStarted(job.attempt + 1, due, given.worker, given.fair_units,
                                                            given.pool))]


def finished(given: AttemptFinished, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """The running attempt ended: succeeded, or failed and then retried, dead-lettered or cancelled."""
    if job is None or job.state is not JobState.RUNNING or job.attempt != given.attempt:
        return []
    emit: Callable[[m.EventBody], Emit] = lambda body: Emit(job.job_id, job.tenant_id, body)  # noqa: E731
    if given.kind == "succeeded":  # also after a cancel request: the work is done, its result stands
        return [emit(m.JobSucceeded(given.attempt, given.duration_us, given.result))]
    retryable = given.retryable and given.kind != "invalid"
    failed = m.JobFailed(given.attempt, given.error_type, given.message, given.duration_us,
                         given.traceback, retryable)
    if job.cancel is not None:  # asked to stop: it stopped (cancelled), or failed on the way; never retried
        cancelled = emit(m.JobCancelled(*job.cancel))
        return [cancelled] if given.kind == "cancelled" else [emit(failed), cancelled]
    return [emit(failed), emit(_after_failure(job, given, retryable, ctx))]


def _after_failure(job: JobView, given: AttemptFinished, retryable: bool, ctx: DecideContext) -> m.EventBody:
    counted = job.counted_attempts()  # the failed one included, the re-queued ones not
    if should_retry(job.max_attempts, counted, retryable):
        delay = backoff_us(ctx.policy(job.task_type).retry, counted, job.job_id)
        return m.JobRetryScheduled(given.attempt + 1, ctx.now + delay)
    reason = "validation_failed" if given.kind == "invalid" else (
        "not_retryable" if not retryable else "max_attempts_exhausted")
    return m.JobDeadLettered(reason, counted)


def requeue_orphan(given: RequeueOrphan, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """A job found running under an older epoch goes back to the queue (or is cancelled, if asked to stop): its
    owner was lost, or handed the partition back without recording the attempt's end."""
    if job is None or job.state is not JobState.RUNNING or not fence.older(job.epoch, ctx.epoch):
        return []
    max_lost = ctx.policy(job.task_type).retry.max_lost
    lost = given.reason is RequeueReason.OWNER_LOST
    if lost and job.cancel is None and lost_too_often(max_lost, job.lost):
        return _lost_for_good(job, max_lost, ctx)
    return _requeued(job, given.reason)


def _lost_for_good(job: JobView, max_lost: int, ctx: DecideContext) -> list[Emit]:
    """The attempt lost once more than ``max_lost`` allows fails, not retryable, and the job is dead-lettered: its
    handler is taken to be what kills its engines."""
    died = job.lost + 1
    message = f"its engine died {died} time{'s' if died > 1 else ''} while running it (max_lost={max_lost})"
    failed = m.JobFailed(job.attempt, LOST_ERROR, message, 0, "", False)  # how long it ran before dying: unknown
    return [Emit(job.job_id, job.tenant_id, failed),
            Emit(job.job_id, job.tenant_id, m.JobDeadLettered(LOST_REPEATEDLY, job.counted_attempts()))]


def hand_back(given: HandBack, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """This owner's own running attempt, past the grace period of a planned hand-back, goes back to the queue for
    the next owner (or is cancelled, if asked to stop). An attempt an older epoch started is the orphans' rule's."""
    if job is None or job.state is not JobState.RUNNING or fence.older(job.epoch, ctx.epoch):
        return []
    return _requeued(job, given.reason)


def _requeued(job: JobView, reason: RequeueReason) -> list[Emit]:
    if job.cancel is not None:  # its attempt was asked to stop: it is not run again
        return [Emit(job.job_id, job.tenant_id, m.JobCancelled(*job.cancel))]
    return [Emit(job.job_id, job.tenant_id, m.JobRequeued(job.epoch, job.attempt, reason.value))]


def progress(given: ProgressReported, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """A running attempt's new progress report (an unchanged one records nothing)."""
    if job is None or job.state is not JobState.RUNNING or job.attempt != given.attempt \
            or job.progress == (given.value, given.message):
        return []
    return [Emit(job.job_id, job.tenant_id, m.JobProgressed(given.attempt, given.value, given.message))]
