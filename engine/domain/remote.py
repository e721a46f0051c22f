"""A remote worker's result: whether it counts, and what it decides. Pure.

A worker runs an attempt the owner dispatched to its pool and answers with ``ReportAttempt``, on the
commands topic like any command: it is decided in the owner's partition, in the transaction that commits
its offset, so it is applied once. It counts only while the attempt it names is the job's running one,
proved by the attempt's fencing token (``engine.domain.fence.fencing_token``: epoch, replays, attempt);
anything else is refused as ``stale_token``: a worker that lost its lease, a duplicate, a result for an
attempt re-queued or retried. Exactly one terminal event per attempt, whatever the network did.

The token's epoch is the one the attempt *started* at (``JobView.started_epoch``), not the owner's: a remote
attempt outlives a change of owner. A new owner adopts it (:func:`adopted`) with a fresh lease instead of
re-queueing it, and its worker's heartbeats and result keep counting; only a new start (a retry, a re-queue
of an in-process attempt) brings a new token.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.contract import messages as m
from engine.domain import attempts
from engine.domain.fence import fencing_token
from engine.domain.inputs import AttemptFinished, CommandInput, DecideContext, Decision, Emit
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState

STALE = "stale_token"
"""The reason a ``CommandRefused`` of a result gives when its token is not the running attempt's."""
LEASE_EXPIRED = "lease_expired"
"""The ``error_type`` of the failure the owner records when a remote attempt's lease lapses."""
OUTCOMES = ("succeeded", "failed", "invalid", "cancelled")


def attempt_epoch(job: JobView) -> int:
    """The epoch ``job``'s latest attempt started at (a record folded before that was kept: its last event's)."""
    return job.started_epoch if job.started_epoch is not None else job.epoch


def current_token(job: JobView) -> int:
    """The fencing token of ``job``'s latest attempt: its start's epoch, whoever owns the partition now."""
    return fencing_token(attempt_epoch(job), job.attempt, job.replays)


def attempt_pool(job: JobView | None, pool_of: Callable[[str], str | None]) -> str | None:
    """The remote pool ``job``'s latest attempt was dispatched to, as its ``JobStarted`` recorded it (v7); for a start
    written before v7, the pool ``pool_of`` (the catalog of today) gives its task type. None: no job, never started,
    or run in an engine's own process."""
    if job is None or job.pool == "":
        return None
    return job.pool if job.pool is not None else (pool_of(job.task_type) if job.started_at is not None else None)


def adopted(job: JobView | None, pool: str | None) -> bool:
    """Whether a new owner (or one handing its partition back) keeps ``job``'s running attempt rather than re-queue
    it: the attempt was dispatched to remote ``pool`` (None: it ran in an engine's process, which is gone), so its
    worker runs on whoever owns the partition; its lease decides its fate (``lease_expired``), never the change."""
    return pool is not None and job is not None and job.state is JobState.RUNNING and job.scope is None


def stale(body: m.ReportAttempt, job: JobView | None) -> str | None:
    """Why ``body`` does not count for ``job`` (None: it does)."""
    if job is None:
        return f"{STALE}: no job with this id"
    if job.state is not JobState.RUNNING:
        return f"{STALE}: the job is {job.state.value}, no attempt of it runs"
    if body.attempt != job.attempt or body.fencing_token != current_token(job):
        return (f"{STALE}: token {body.fencing_token} (attempt {body.attempt}) is not the running attempt's "
                f"({current_token(job)}, attempt {job.attempt})")
    return None


def reported(body: m.ReportAttempt, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A remote attempt's result: decided like a local one's if its token is current, refused otherwise."""
    cmd = given.command
    why = stale(body, job)
    if why is None and body.outcome not in OUTCOMES:
        why = f"outcome {body.outcome!r} is not one of {', '.join(OUTCOMES)}"
    if why is not None or job is None:
        state = job.state.value if job is not None else "unknown"
        tenant = job.tenant_id if job is not None else cmd.tenant_id
        return [Emit(cmd.job_id, tenant, m.CommandRefused("ReportAttempt", state, why or STALE))]
    given_ = AttemptFinished(job.job_id, body.attempt, body.outcome, body.duration_us, body.result,
                             body.error_type, body.message, body.traceback, body.retryable)
    return list(attempts.finished(given_, job, ctx))
