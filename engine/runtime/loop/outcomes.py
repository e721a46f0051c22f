"""The results step: each finished attempt becomes its events, if its partition is still ours.

A result counts only if the partition is still held under the epoch that started the
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
from engine.runtime.loop.partition import Partition
from engine.runtime.loop.poison import PoisonDesk

log = logging.getLogger("epochq.outcomes")


def record(partitions: Mapping[int, Partition], results: list[RunResult], board: BreakerBoard,
           poison: PoisonDesk, ctx_of: Mapping[int, DecideContext]) -> list[m.Event]:
    """Decide every finished attempt whose partition is still ours under the same epoch; the events staged
    (folded into their partitions' batches), in order."""
    events: list[m.Event] = []
    for result in results:
        req = result.request
        partition = partitions.get(req.partition)
        if partition is None or not partition.deciding or not fence.counts(req.epoch, partition.epoch):
            log.warning("dropping result of job %s attempt %d: partition %d no longer ours at epoch %d",
                        req.job_id, req.attempt, req.partition, req.epoch)
            continue
        ctx, before = ctx_of[partition.number], len(partition.staged.events)
        error = partition.attempt(_record_one, partition, result, board, ctx)
        if error is not None:
            poison.job(partition, req.job_id, error, ctx, "result")
        events += partition.staged.events[before:]
    return events


def _record_one(partition: Partition, result: RunResult, board: BreakerBoard, ctx: DecideContext) -> None:
    req, out = result.request, result.outcome
    given = AttemptFinished(req.job_id, req.attempt, out.kind, out.duration_us, out.result, out.error_type,
                            out.message, out.traceback, out.retryable)
    start = len(partition.staged.events)
    events = partition.decide(req.job_id, given, ctx)
    if out.traceparent and req.traceparent:  # a traced job: what the attempt decided carries its span's context
        partition.staged.trace(start, out.traceparent)
    if out.records:
        effects.stage(partition, result, events)
    if events:
        log_failures(events, req.task_type)
        body = board.outcome(req.task_type, out.kind, ctx.now)
        if body is not None:
            partition.stage(Emit(None, None, body), ctx.now)


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


def record_progress(partitions: Mapping[int, Partition], reports: list[tuple[RunRequest, float | None, str]],
                    ctx_of: Mapping[int, DecideContext]) -> None:
    """Decide each running attempt's latest progress report, if its partition is still ours and deciding."""
    for req, value, message in reports:
        partition, ctx = partitions.get(req.partition), ctx_of.get(req.partition)
        if partition is None or ctx is None or not fence.counts(req.epoch, partition.epoch):
            continue  # not ours now, or writing: the next report is taken
        error = partition.attempt(partition.decide, req.job_id, ProgressReported(req.job_id, req.attempt, value,
                                                                                  message), ctx)
        if error is not None:
            log.warning("progress of job %s not recorded: %s", req.job_id, error)
