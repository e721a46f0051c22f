"""Acting on what the projection says: due timers, free slots, handler results, orphans."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from engine.contract import messages as m
from engine.domain.breaker import (
    CLOSED, BreakerClosed, BreakerOpened, BreakerState, on_cooled_down, on_failure, on_success,
)
from engine.domain.decide import AttemptFinished, DecideContext, Emit, RequeueOrphan
from engine.domain.jobs import JobView
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.runtime.dispatch import LaneDispatch, rotate
from engine.runtime.executor import RunRequest, RunResult
from engine.runtime.owner import PartitionOwner, Phase
from engine.runtime.timers import Timers
from projections.evolve import Folded
from projections.views.breakers import BreakerRecord
from projections.views import keys as k

if TYPE_CHECKING:
    from engine.runtime.loop import Engine

log = logging.getLogger("epochq.work")


class Work:
    """The engine's hands: it turns projection state into decisions and handler runs."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._turn = 0
        self.breakers: dict[str, BreakerState] = {}  # per task type, shared by every owned partition
        self._breaker_since: dict[str, int] = {}
        self.timers = Timers(engine)  # the time router of every owned partition

    def active(self) -> list[PartitionOwner]:
        """Owners allowed to decide right now."""
        return [o for o in self.engine.owners.values() if o.phase is Phase.ACTIVE and not o.revoking]

    # --- results -------------------------------------------------------------------------

    def on_results(self, results: list[RunResult]) -> None:
        """Record each finished attempt, if its partition is still ours under the same epoch."""
        for result in results:
            req, out = result.request, result.outcome
            owner = self.engine.owners.get(req.partition)
            if owner is None or owner.epoch != req.epoch or owner.phase is not Phase.ACTIVE:
                log.warning("dropping result of job %s attempt %d: partition %d no longer ours at epoch %d",
                            req.job_id, req.attempt, req.partition, req.epoch)
                continue
            given = AttemptFinished(req.job_id, req.attempt, out.kind, out.duration_us, out.result,
                                    out.error_type, out.message, out.traceback, out.retryable)
            ctx = owner.context(self.engine.base_ctx)
            if owner.decide(req.job_id, given, ctx):
                self._breaker_outcome(owner, req.task_type, out.kind, ctx.now)

    def _breaker_outcome(self, owner: PartitionOwner, task_type: str, kind: str, now: int) -> None:
        """Feed a finished attempt to its task type's breaker; record any change as an event."""
        policy = self.engine.breaker_policy(task_type)
        if policy is None or kind == "invalid":
            return
        state = self.breakers.get(task_type, CLOSED)
        step = on_success if kind == "succeeded" else on_failure
        self.breakers[task_type], change = step(state, policy, now)
        if isinstance(change, BreakerOpened):
            body: m.EventBody = m.BreakerOpened(task_type, change.failures, change.reopen_at, change.reason)
        elif isinstance(change, BreakerClosed):
            body = m.BreakerClosed(task_type, change.reason)
        else:
            return
        owner.stage(Emit(None, None, body), now)
        log.warning("breaker of %s: %s (%s)", task_type, type(body).__name__, change.reason)

    def cool_down_ended(self, owner: PartitionOwner, task_type: str, ctx: DecideContext) -> None:
        """A breaker's cool-down timer fired (the time router): half-open it, recorded as an event."""
        policy = self.engine.breaker_policy(task_type)
        if policy is None:
            return
        self.breakers[task_type], half = on_cooled_down(self.breakers.get(task_type, CLOSED), policy, ctx.now)
        if half is not None:
            owner.stage(Emit(None, None, m.BreakerHalfOpened(task_type, "", half.reason)), ctx.now)
            log.warning("breaker of %s: BreakerHalfOpened (%s)", task_type, half.reason)

    def resume_breaker(self, record: BreakerRecord) -> None:
        """Take a breaker status found in a newly owned partition if it is newer than ours."""
        if record.since > self._breaker_since.get(record.task_type, -1):
            self._breaker_since[record.task_type] = record.since
            self.breakers[record.task_type] = record.state()

    # --- timers --------------------------------------------------------------------------

    def fire_timers(self) -> None:
        """Fire due job and schedule timers through the time router (engine/runtime/timers.py)."""
        self.timers.fire()

    # --- dispatch ------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Start queued jobs while their lane has free worker slots, fairly across tenants."""
        owners = self.active()
        if not owners:
            return
        self._turn += 1
        for lane in RUNNABLE_LANES:
            free = self.engine.executor.free_slots(lane) - self._staged_starts(lane)
            if free > 0:
                self._deal(lane, free, rotate(owners, self._turn))

    def _deal(self, lane: Lane, free: int, owners: list[PartitionOwner]) -> None:
        """Hand free slots to the partitions one at a time, in turn, so none waits behind another's backlog."""
        rounds = [LaneDispatch(self.engine, owner, lane.value) for owner in owners]
        while free > 0 and rounds:
            still = []
            for dispatch in rounds:
                if free > 0 and dispatch.start(1):
                    free -= 1
                    still.append(dispatch)
            rounds = still

    def _staged_starts(self, lane: Lane) -> int:
        return sum(1 for o in self.engine.owners.values() for _, job in o.outbox.starts if job.lane == lane.value)

    def start(self, owner: PartitionOwner, event: m.Event, job: JobView) -> None:
        """Hand a committed JobStarted to the executor."""
        body = event.body
        assert isinstance(body, m.JobStarted)
        spec_timeout = self._timeout(job.task_type)
        request = RunRequest(
            partition=owner.partition, epoch=owner.epoch, job_id=job.job_id, tenant=job.tenant_id,
            task_type=job.task_type, attempt=body.attempt, lane=Lane(job.lane), payload=job.payload,
            idempotency_key=job.idempotency_key, deadline=time.time() + spec_timeout,
            queued_at_us=job.queued_at or job.submitted_at,
        )
        self.engine.executor.submit(request)

    def _timeout(self, task_type: str) -> float:
        try:
            return float(self.engine.app.spec(task_type).timeout)
        except Exception:  # noqa: BLE001 - unknown types fail inside the executor with a clear error
            return 60.0

    # --- orphans -------------------------------------------------------------------------

    def requeue_orphans(self, owner: PartitionOwner) -> None:
        """Put back jobs that were running under an older epoch (at-least-once)."""
        ctx = owner.context(self.engine.base_ctx)
        orphans = [key[len(k.RUNNING):].decode() for key, epoch in owner.store.scan(k.RUNNING)
                   if int(epoch) < owner.epoch]
        for job_id in orphans:
            owner.decide(job_id, RequeueOrphan(job_id), ctx)
        if orphans:
            log.info("partition %d: requeued %d jobs left running by epoch < %d", owner.partition,
                     len(orphans), owner.epoch)

    # --- observing -----------------------------------------------------------------------

    def observe(self, owner: PartitionOwner, event: m.Event, folded: Folded) -> None:
        """Count what was folded (metrics) and log what was not applied (structured fields)."""
        self.engine.metrics.observe(event, folded.status, folded.before, folded.after,
                                    live=owner.phase is not Phase.RESTORING)
        if folded.status != "applied":
            log.warning("event %s of job %s %s (epoch %d, newest claim %d)", event.type, event.job_id,
                        folded.status, event.epoch, owner.epoch,
                        extra={"job_id": event.job_id, "tenant": event.tenant_id,
                               "epoch": event.epoch, "partition": owner.partition})
        self.timers.observe(owner, event, folded)
