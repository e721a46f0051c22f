"""The time router in the engine: per owned partition, timers for the near horizon in memory, the rest on disk.

Each owned partition has three due-time indexes in its store — ``d:<due>:<job>`` (delayed
jobs, retry backoffs, reschedules), ``D:<due>:<schedule>`` (armed schedule occurrences) and
``w:<reopen_at>:<task type>`` (open circuit breakers' cool-downs) — and, for each, a :class:`Timeline`: the pure
``HotSet`` of ``engine.domain.timerouter`` holding the entries due within the horizon, plus the
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
into the due index within the horizon adds its timer, one that takes it out removes it. The
timers read what the draft staged (:meth:`PartitionTimers.catch_up`) before they fire and
before the draft's work is written; nothing is wired into the draft.
A ``PartitionTimers`` belongs to one activation of one owner and is never persisted: a new
owner (or one resynced after an aborted transaction) starts empty and sweeps. Memory grows
with the entries due inside the horizon, never with all future jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.contract import messages as m
from engine.domain.decide import DecideContext, Emit, TimerFired
from engine.domain.lifecycle import JobState
from engine.domain.schedules import ScheduleDue
from engine.domain.timerouter import (
    HotSet, Windows, overdue_range, overdue_sweep_due, promotion_range, promotion_sweep_due,
)
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.schedules import ScheduleDesk
from projections.evolve import APPLIED, Folded
from projections.views import dueindex
from projections.views.dueindex import bound
from projections.views.dueindex import scan_due as scan_due  # the time router's reads, kept importable here

if TYPE_CHECKING:  # types only: engine.testing runs the timers over an in-memory store
    from projections.store import ProjectionStore

log = logging.getLogger("epochq.timers")

FIRE_BATCH = 2000
"""Timers fired per partition per tick, from the hot set and from the overdue sweep each."""
WAITING = frozenset({JobState.SCHEDULED, JobState.RETRYING})
BREAKER_EVENTS = (m.BreakerOpened, m.BreakerHalfOpened, m.BreakerClosed)


class Timeline:
    """One due index of one partition: its hot set and the state of its promotion and overdue sweeps."""

    def __init__(self, prefix: bytes, windows: Windows):
        """``prefix``: one of ``projections.views.dueindex.INDEXES``."""
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
            self._overdue = (bound(self.prefix, slice_.after_us), bound(self.prefix, slice_.until_us))
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
    """The timers of one partition under one activation: jobs, schedules, breaker cool-downs, pings."""

    def __init__(self, draft: Draft, windows: Windows, board: BreakerBoard, set_aside: SetAside | None = None):
        self.draft = draft  # the partition's draft: what the timers decide is staged there
        self.jobs = Timeline(dueindex.JOBS, windows)
        self.schedules = Timeline(dueindex.SCHEDULES, windows)
        self.breakers = Timeline(dueindex.BREAKERS, windows)
        self.desk = ScheduleDesk(draft, self.schedules.hot)
        self.board = board
        self.set_aside = set_aside or _log_only
        self.overdue_fired = 0
        self._seen: tuple[object, int] = (None, 0)  # (the draft's staged value, how many of its events seen)

    def tick(self, ctx: DecideContext) -> tuple[bool, int]:
        """Sweep if due, fire what is due; (whether a promotion sweep ran, jobs the overdue sweep fired)."""
        store, now = self.draft.store, ctx.now
        assert store is not None, "an active partition has its store open"
        self.catch_up()
        promoted = self.jobs.promote(store, now) | self.schedules.promote(store, now) | \
            self.breakers.promote(store, now)
        overdue = self._fire_jobs(self.jobs.overdue(store, now), ctx)
        self._fire_jobs(self.jobs.hot.pop_due(now, FIRE_BATCH), ctx)
        for sid in self.schedules.overdue(store, now) + self.schedules.hot.pop_due(now, FIRE_BATCH):
            error = self.draft.attempt(self.desk.decide, sid, ScheduleDue(sid), ctx)
            if error is not None:
                self.set_aside(self.draft, None, error, ctx, "schedule")
            self.catch_up()
        for task_type in self.breakers.overdue(store, now) + self.breakers.hot.pop_due(now, FIRE_BATCH):
            body = self.board.cooled(task_type, now)
            if body is not None:
                self.draft.stage(Emit(None, None, body), now)
        self.catch_up()
        self.desk.ping(now)
        self.overdue_fired += overdue
        return promoted, overdue

    def _fire_jobs(self, job_ids: list[str], ctx: DecideContext) -> int:
        fired = 0
        for job_id in job_ids:
            before = len(self.draft.staged.events)
            error = self.draft.attempt(self.draft.decide, job_id, TimerFired(job_id), ctx)
            if error is not None:
                self.set_aside(self.draft, job_id, error, ctx, "timer")
            fired += len(self.draft.staged.events) > before
            self.catch_up()
        return fired

    def catch_up(self) -> None:
        """Observe the events staged in the draft since the last look (:meth:`observe`): called before the
        timers fire and before the draft's work is taken for writing, never from inside a decision, so an
        input undone (``Draft.attempt``) is never seen."""
        staged = self.draft.staged
        seen_of, seen = self._seen
        if seen_of is not staged:
            seen = 0
        for event, folded in zip(staged.events[seen:], staged.folds[seen:]):
            self.observe(event, folded)
        self._seen = (staged, len(staged.events))

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

    def next_due(self) -> int | None:
        """The earliest due time held in memory (µs), or None."""
        dues = [t for t in (self.jobs.hot.next_due_us(), self.schedules.hot.next_due_us(),
                            self.breakers.hot.next_due_us(), self.desk.next_ping()) if t is not None]
        return min(dues) if dues else None

    def held(self) -> tuple[int, int]:
        """(job timers, schedule timers) held in memory."""
        return len(self.jobs.hot), len(self.schedules.hot)


SetAside = Callable[[Draft, "str | None", BaseException, DecideContext, str], None]


def _log_only(draft: Draft, job_id: str | None, error: BaseException, ctx: DecideContext, step: str) -> None:
    log.error("partition %d: %s step raised for %s: %s", draft.number, step, job_id, error)
