"""Poison: an input that made a step raise is set aside as an event, and the loop goes on.

What was folded and staged for the input has been undone (``Draft.attempt``, ``loop/draft.py``); this
module records why, in the log, where the client and the auditor see it:

- a command: ``JobRejected(reason="engine_error")`` for its job, or, when even that cannot
  be written, ``CommandQuarantined`` with the record's bytes;
- a job the engine cannot act on (a result, a timer, a start): ``JobDeadLettered`` with
  reason ``engine_error`` (after a ``JobFailed`` when it was running), replayable once fixed.

Each one counts in ``epochq_poison_total{step}`` and logs one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from engine.contract import messages as m
from engine.domain.decide import DecideContext, Decision, Emit, told
from engine.domain.lifecycle import JobState, Trigger, allows
from engine.runtime.loop.draft import Draft

log = logging.getLogger("epochq.poison")

REASON = "engine_error"
MAX_DETAIL = 500
MAX_QUARANTINED_BYTES = 64 * 1024
"""How much of an undecodable command a CommandQuarantined keeps (its length is in the error)."""


def quarantined(topic: str, partition: int, offset: int, error: str, raw: bytes | None) -> m.CommandQuarantined:
    """The event that sets an undecidable command aside, keeping at most MAX_QUARANTINED_BYTES of it."""
    raw = raw or b""
    if len(raw) > MAX_QUARANTINED_BYTES:
        error = f"{error} (the record is {len(raw)} bytes; its first {MAX_QUARANTINED_BYTES} are kept)"
        raw = raw[:MAX_QUARANTINED_BYTES]
    return m.CommandQuarantined(topic, partition, offset, error, raw)


def describe(error: BaseException) -> str:
    """One line naming the error, clipped."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


class PoisonDesk:
    """Sets poison inputs aside; ``count(step)`` feeds the metric."""

    def __init__(self, count: Callable[[str], None]):
        self.count = count

    def job(self, draft: Draft, job_id: str | None, error: BaseException, ctx: DecideContext,
            step: str) -> None:
        """A step raised for ``job_id``: dead-letter the job if its state allows, else log."""
        self.count(step)
        log.error("partition %d: the %s step raised for job %s; setting it aside: %s",
                  draft.number, step, job_id, describe(error), exc_info=error)
        job = draft.job(job_id) if job_id else None
        if job is None:
            return
        emits = told(job, _dead_letter(job.job_id, job.tenant_id, job.state, job.counted_attempts(), describe(error)),
                     ctx.now)
        if emits and draft.attempt(draft.take, emits, ctx.now) is not None:
            log.error("partition %d: job %s could not be dead-lettered either; it stays %s",
                      draft.number, job_id, job.state)

    def command(self, draft: Draft, command: m.Command | None, offset: int, raw: bytes,
                error: BaseException, ctx: DecideContext, topic: str) -> None:
        """Deciding the command at ``offset`` raised: reject its job, or quarantine the record."""
        self.count("decide")
        log.error("partition %d: deciding the command at offset %d raised; setting it aside: %s",
                  draft.number, offset, describe(error), exc_info=error)
        if command is not None and isinstance(command.body, m.SubmitJob):
            rejected = m.JobRejected(command.body.task_type, REASON, describe(error))
            emit = Emit(command.job_id, command.tenant_id, rejected)
            if draft.attempt(draft.stage, emit, ctx.now, command.command_id) is None:
                return
        body = quarantined(topic, draft.number, offset, f"{REASON}: {describe(error)}", raw)
        if draft.attempt(draft.stage, Emit(None, None, body), ctx.now) is not None:
            log.error("partition %d: the command at offset %d could not be quarantined either; skipped",
                      draft.number, offset)


def _dead_letter(job_id: str, tenant: str, state: JobState, attempt: int, detail: str) -> Decision:
    if state is JobState.RUNNING:
        failed = m.JobFailed(attempt, "EngineError", detail, 0, "", False)
        return [Emit(job_id, tenant, failed), Emit(job_id, tenant, m.JobDeadLettered(REASON, attempt))]
    if allows(state, Trigger.DEAD_LETTER):
        return [Emit(job_id, tenant, m.JobDeadLettered(REASON, attempt))]
    return []
