"""The results step: each finished attempt becomes its events, if its partition is still ours.

A result counts only if its partition's draft is stamped with the epoch that started the
attempt (``engine.domain.fence``); otherwise a newer owner has re-queued the job and this
result is dropped. A finished attempt also feeds its task type's circuit breaker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.decide import AttemptFinished, DecideContext, Emit, ProgressReported
from engine.runtime.execution.executor import RunRequest, RunResult
from engine.runtime.loop import effects
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.poison import PoisonDesk

log = logging.getLogger("epochq.outcomes")


def record(draft: Draft, results: list[RunResult], board: BreakerBoard, poison: PoisonDesk,
           ctx: DecideContext) -> None:
    """Decide every finished attempt of ``draft``'s partition started under the epoch it holds now, into the draft
    (its staged events are the step's output)."""
    for result in results:
        req = result.request
        if req.partition != draft.number or not fence.counts(req.epoch, draft.epoch):
            log.warning("dropping result of job %s attempt %d: partition %d no longer ours at epoch %d",
                        req.job_id, req.attempt, req.partition, req.epoch)
            continue
        error = draft.attempt(_record_one, draft, result, board, ctx)
        if error is not None:
            poison.job(draft, req.job_id, error, ctx, "result")


def _record_one(draft: Draft, result: RunResult, board: BreakerBoard, ctx: DecideContext) -> None:
    req, out = result.request, result.outcome
    given = AttemptFinished(req.job_id, req.attempt, out.kind, out.duration_us, out.result, out.error_type,
                            out.message, out.traceback, out.retryable)
    start = len(draft.staged.events)
    events = draft.decide(req.job_id, given, ctx)
    if out.traceparent and req.traceparent:  # a traced job: what the attempt decided carries its span's context
        draft.staged.trace(start, out.traceparent)
    if out.records:
        effects.stage(draft.staged, result, events)
    if events:
        log_failures(events, req.task_type)
        body = board.outcome(req.task_type, out.kind, ctx.now)
        if body is not None:
            draft.stage(Emit(None, None, body), ctx.now)


def log_failures(events: list[m.Event], task_type: str) -> None:
    """Every failed attempt at WARNING, every dead letter at ERROR: an operator reads them in the engine's log."""
    for event in events:
        body = event.body
        if isinstance(body, m.JobFailed):
            log.warning("job %s (%s, tenant %s) attempt %d failed: %s: %s", event.job_id, task_type,
                        event.tenant_id, body.attempt, body.error_type, body.message)
        elif isinstance(body, m.JobDeadLettered):
            log.error("job %s (%s, tenant %s) dead-lettered after %d attempt(s): %s", event.job_id, task_type,
                      event.tenant_id, body.attempts, body.reason)
        elif isinstance(body, m.JobCancelled):
            log.info("job %s (%s, tenant %s) cancelled: %s", event.job_id, task_type, event.tenant_id,
                     body.reason or "no reason given")


def record_progress(drafts: Mapping[int, Draft], reports: list[tuple[RunRequest, float | None, str]],
                    ctx_of: Mapping[int, DecideContext]) -> None:
    """Decide each running attempt's latest progress report, if its partition is one of ``drafts`` (those deciding
    now) under the same epoch."""
    for req, value, message in reports:
        draft, ctx = drafts.get(req.partition), ctx_of.get(req.partition)
        if draft is None or ctx is None or not fence.counts(req.epoch, draft.epoch):
            continue  # not ours now, or writing: the next report is taken
        error = draft.attempt(draft.decide, req.job_id, ProgressReported(req.job_id, req.attempt, value, message),
                              ctx)
        if error is not None:
            log.warning("progress of job %s not recorded: %s", req.job_id, error)
