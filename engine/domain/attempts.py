"""A job's attempts: when it is queued, started, finished, retried, re-queued after a failover. Pure."""

from __future__ import annotations

from collections.abc import Callable

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.inputs import (
    AttemptFinished, DecideContext, Emit, ProgressReported, RequeueOrphan, StartAttempt, TimerFired,
)
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from engine.domain.retry import backoff_us, should_retry


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
    return [Emit(job.job_id, job.tenant_id, m.JobStarted(job.attempt + 1, due, given.worker, given.fair_units))]


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
    if should_retry(job.max_attempts, given.attempt, retryable):
        delay = backoff_us(ctx.policy(job.task_type).retry, given.attempt, job.job_id)
        return m.JobRetryScheduled(given.attempt + 1, ctx.now + delay)
    reason = "validation_failed" if given.kind == "invalid" else (
        "not_retryable" if not retryable else "max_attempts_exhausted")
    return m.JobDeadLettered(reason, given.attempt)


def requeue_orphan(given: RequeueOrphan, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """A job found running under an older epoch goes back to the queue (or is cancelled, if asked to stop)."""
    if job is None or job.state is not JobState.RUNNING or not fence.older(job.epoch, ctx.epoch):
        return []
    if job.cancel is not None:  # its attempt was asked to stop: it is not run again
        return [Emit(job.job_id, job.tenant_id, m.JobCancelled(*job.cancel))]
    return [Emit(job.job_id, job.tenant_id, m.JobRequeued(job.epoch, job.attempt))]


def progress(given: ProgressReported, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    """A running attempt's new progress report (an unchanged one records nothing)."""
    if job is None or job.state is not JobState.RUNNING or job.attempt != given.attempt \
            or job.progress == (given.value, given.message):
        return []
    return [Emit(job.job_id, job.tenant_id, m.JobProgressed(given.attempt, given.value, given.message))]
