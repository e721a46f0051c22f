"""The time router in the engine: per owned partition, timers for the near horizon in memory, the rest on disk.

Each owned partition has three due-time indexes in its store — ``d:<due>:<job>`` (delayed
jobs, retry backoffs, reschedules), ``D:<due>:<schedule>`` (armed schedule occurrences) and
``w:<reopen_at>:<task type>`` (open circuit breakers' cool-downs) — and, for each, a :class:`Timeline`: the pure ``HotSet`` of
``engine.domain.timerouter`` holding the entries due within the horizon, plus the
bookkeeping of its two sweeps. Every tick, per partition:

1. **promotion sweep** (every ``sweep_interval``): load the slice of the disk index that
   entered the horizon since the last sweep into the hot set;
2. **overdue sweep** (every ``overdue_interval``, at once on a new owner, and whenever a
   promotion left a hole): stream the disk index from its start up to ``now - sweep_interval``
   and fire what it finds, a batch per tick — the safety net after a failover, a clock jump
   or a lost pop;
3. **pop** what is due from the hot set and decide ``TimerFired`` (jobs) or ``ScheduleDue``
   (schedules) against the projection plus overlay, or end a breaker's cool-down
   (``BreakerHalfOpened``): a stale pop yields no event.

The hot set follows the fold (:meth:`PartitionTimers.observe`): an event that puts a job
into the due index within the horizon adds its timer, one that takes it out removes it.
A ``PartitionTimers`` belongs to one activation of one owner and is never persisted: a new
owner (or one resynced after an aborted transaction) starts empty and sweeps. Memory grows
with the entries due inside the horizon, never with all future jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.contract import messages as m
from engine.domain.decide import CommandInput, DecideContext, TimerFired
from engine.domain.lifecycle import JobState
from engine.domain.schedules import ScheduleDue
from engine.domain.timerouter import (
    SECOND, DueRange, HotSet, Windows, overdue_range, overdue_sweep_due, promotion_range, promotion_sweep_due,
)
from engine.runtime.owner import PartitionOwner, now_us
from engine.runtime.schedules import ScheduleDesk
from projections.evolve import APPLIED, Folded
from projections.store import ProjectionStore
from projections.views import keys as k
from projections.views.schedules import SCHEDULE_DUE

if TYPE_CHECKING:
    from engine.runtime.loop import Engine

log = logging.getLogger("epochq.timers")

FIRE_BATCH = 2000
"""Timers fired per partition per tick, from the hot set and from the overdue sweep each."""
WAITING = frozenset({JobState.SCHEDULED, JobState.RETRYING})
BREAKER_EVENTS = (m.BreakerOpened, m.BreakerHalfOpened, m.BreakerClosed)


def scan_due(store: ProjectionStore, prefix: bytes, slice_: DueRange) -> list[tuple[int, str]]:
    """The ``(due_at, id)`` entries of a due index in ``(after, until]``, earliest first."""
    start, stop = _bound(prefix, slice_.after_us), _bound(prefix, slice_.until_us)
    out = []
    for key, value in store.scan(prefix, start):
        if key >= stop:
            break
        out.append((int(key[len(prefix):len(prefix) + 20]), value.decode()))
    return out


def _bound(prefix: bytes, due_at: int) -> bytes:
    """The first key of entries due after ``due_at``."""
    return prefix + k.num(max(0, due_at + 1))


class Timeline:
    """One due index of one partition: its hot set and the state of its promotion and overdue sweeps."""

    def __init__(self, prefix: bytes, windows: Windows):
        self.prefix, self.windows = prefix, windows
        self.hot = HotSet()
        self.promoted_until: int | None = None
        self.last_overdue_sweep: int | None = None
        self._overdue: tuple[bytes, bytes] | None = None  # (next key, stop key) of a sweep in progress

    def promote(self, store: ProjectionStore, now: int) -> bool:
        """Run the promotion sweep if one is due; whether it ran."""
        if not promotion_sweep_due(now, self.promoted_until, self.windows):
            return False
        slice_ = promotion_range(now, self.promoted_until, self.windows)
        self.hot.promote(scan_due(store, self.prefix, slice_), slice_.until_us)
        self.promoted_until = slice_.until_us
        return True

    def overdue(self, store: ProjectionStore, now: int, limit: int = FIRE_BATCH) -> list[str]:
        """The next batch of the overdue sweep (starting one if it is due); empty when none runs."""
        if self._overdue is None:
            if not overdue_sweep_due(now, self.last_overdue_sweep, self.promoted_until, self.windows):
                return []
            slice_ = overdue_range(now, self.windows)
            self._overdue = (_bound(self.prefix, slice_.after_us), _bound(self.prefix, slice_.until_us))
            self.last_overdue_sweep = now
        start, stop = self._overdue
        found: list[str] = []
        for key, value in store.scan(self.prefix, start):
            if key >= stop:
                break
            if len(found) == limit:
                self._overdue = (key, stop)
                return found
            found.append(value.decode())
        self._overdue = None
        return found

    @property
    def sweeping(self) -> bool:
        """Whether an overdue sweep is in progress."""
        return self._overdue is not None


class PartitionTimers:
    """The timers of one owned partition under one activation: jobs, schedules, and schedule pings."""

    def __init__(self, owner: PartitionOwner, windows: Windows,
                 cooled: Callable[[PartitionOwner, str, DecideContext], None] | None = None):
        self.owner = owner
        self.jobs = Timeline(k.DUE, windows)
        self.schedules = Timeline(SCHEDULE_DUE, windows)
        self.breakers = Timeline(k.BREAKER_DUE, windows)
        self.desk = ScheduleDesk(owner, self.schedules.hot)
        self.cooled = cooled or (lambda owner, task_type, ctx: None)  # a breaker's cool-down ended
        self.overdue_fired = 0

    def tick(self, ctx: DecideContext) -> tuple[bool, int]:
        """Sweep if due, fire what is due; (whether a promotion sweep ran, jobs the overdue sweep fired)."""
        store, now = self.owner.store, ctx.now
        promoted = self.jobs.promote(store, now) | self.schedules.promote(store, now) | \
            self.breakers.promote(store, now)
        overdue = self._fire_jobs(self.jobs.overdue(store, now), ctx)
        self._fire_jobs(self.jobs.hot.pop_due(now, FIRE_BATCH), ctx)
        for sid in self.schedules.overdue(store, now) + self.schedules.hot.pop_due(now, FIRE_BATCH):
            self.desk.decide(sid, ScheduleDue(sid), ctx)
        for task_type in self.breakers.overdue(store, now) + self.breakers.hot.pop_due(now, FIRE_BATCH):
            self.cooled(self.owner, task_type, ctx)
        self.desk.ping(now)
        self.overdue_fired += overdue
        return promoted, overdue

    def _fire_jobs(self, job_ids: list[str], ctx: DecideContext) -> int:
        return sum(1 for job_id in job_ids if self.owner.decide(job_id, TimerFired(job_id), ctx))

    def observe(self, event: m.Event, folded: Folded) -> None:
        """Keep the hot sets in step with one folded event."""
        if folded.status == APPLIED and folded.after is not None:
            job = folded.after
            if job.state in WAITING and job.due_at is not None:
                self.jobs.hot.add(job.due_at, job.job_id)
            elif folded.before is not None and folded.before.state in WAITING:
                self.jobs.hot.remove(job.job_id)
        body = event.body
        if folded.status == APPLIED and isinstance(body, BREAKER_EVENTS):
            if isinstance(body, m.BreakerOpened):
                self.breakers.hot.add(body.reopen_at, body.task_type)
            else:
                self.breakers.hot.remove(body.task_type)
        self.desk.observe(event, folded)

    def held(self) -> tuple[int, int]:
        """(job timers, schedule timers) held in memory."""
        return len(self.jobs.hot), len(self.schedules.hot)


class Timers:
    """The time router of one engine instance: a ``PartitionTimers`` per active owner."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.partitions: dict[int, PartitionTimers] = {}

    def activate(self, owner: PartitionOwner) -> PartitionTimers:
        """Fresh timers for an owner that just became active (claimed, or resynced): they sweep at once."""
        timers = PartitionTimers(owner, self.engine.options.windows, self.engine.work.cool_down_ended)
        timers.desk.load(now_us())
        self.partitions[owner.partition] = timers
        w = self.engine.options.windows
        log.info("partition %d: time router active (horizon %.0f s, sweep every %.1f s, overdue sweep every %.0f s)",
                 owner.partition, w.horizon_us / SECOND, w.sweep_interval_us / SECOND,
                 w.overdue_sweep_interval_us / SECOND)
        return timers

    def of(self, owner: PartitionOwner) -> PartitionTimers | None:
        """The timers of this owner's current activation, if it has been activated."""
        timers = self.partitions.get(owner.partition)
        return timers if timers is not None and timers.owner is owner else None

    def fire(self) -> None:
        """One round for every active partition: sweeps when due, then every due timer."""
        for p in [p for p, t in self.partitions.items() if self.engine.owners.get(p) is not t.owner]:
            del self.partitions[p]
            self.engine.metrics.set_timers(p, None)
        for owner in self.engine.work.active():
            timers = self.of(owner) or self.activate(owner)
            promoted, overdue = timers.tick(owner.context(self.engine.base_ctx))
            if overdue:
                self.engine.metrics.timers_overdue.inc(overdue)
                log.info("partition %d: overdue sweep fired %d job(s) the hot set did not hold",
                         owner.partition, overdue, extra={"partition": owner.partition})
            if promoted:
                self._report(owner.partition, timers)

    def _report(self, partition: int, timers: PartitionTimers) -> None:
        jobs, schedules = timers.held()
        self.engine.metrics.set_timers(partition, (jobs, schedules))
        log.debug("partition %d: %d job timer(s) and %d schedule timer(s) in memory, horizon until %s",
                  partition, jobs, schedules, timers.jobs.promoted_until)

    def observe(self, owner: PartitionOwner, event: m.Event, folded: Folded) -> None:
        """Feed one folded event to the partition's timers (nothing before the owner is active)."""
        timers = self.of(owner)
        if timers is not None:
            timers.observe(event, folded)

    def on_schedule_command(self, owner: PartitionOwner, command: m.Command, offset: int, ctx: DecideContext) -> None:
        """Decide a schedule command (its "job" is the schedule) against the partition's schedules."""
        timers = self.of(owner) or self.activate(owner)
        sid = getattr(command.body, "schedule_id", "")
        timers.desk.decide(sid, CommandInput(command, offset), ctx, command.command_id, command.correlation_id)
