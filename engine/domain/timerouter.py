"""Where a job waits for its due time: ready now, in memory (hot), or on disk only (cold). Pure.

Every delayed thing — a job submitted with ``run_at``/``delay``, a retry backoff, a breaker
cool-down, a schedule's next occurrence — is one entry ``d:<due_at>:<id>`` in the partition
projection's due-time index on disk. This module decides which of those entries also live
in memory, and which slices of the index the engine must read, and when. It does no I/O
and reads no clock: ``now_us`` (int microseconds, UTC) is always an argument.

Bands (``band_of``), with ``w = Windows(...)``::

    due_at <= now + w.immediate_us                    -> READY  (queue it now, no timer)
    now + w.immediate_us < due_at <= now + w.horizon_us -> HOT    (due index + in-memory timer)
    now + w.horizon_us < due_at                       -> COLD   (due index only)

The bounds are inclusive at the top of each band: a job due exactly at ``now`` is READY, a
job due exactly at ``now + horizon`` is HOT, so ``band_of`` agrees with ``promotion_range``,
whose slices are ``(after, until]``.

Why memory is bounded by the horizon. The ``HotSet`` accepts a job only if its due time is
at or before ``horizon_end``, the top of the last promotion sweep; ``horizon_end`` is at
most ``now + horizon_us``. So the set holds the jobs due in the next ``horizon_us`` (60 s by
default) and nothing else: ten million jobs due next month cost disk, not RAM. The disk
index is complete; the hot set is only a cache of its near end, complete for
``(floor, horizon_end]``, refilled by the promotion sweep every ``sweep_interval_us``, which
loads the slice ``promotion_range`` names (normally one sweep interval's worth of jobs).

Cancels and reschedules. ``HotSet.remove`` and a second ``HotSet.add`` with a new due time
do not search the heap: the map ``job_id -> due_at`` is the truth, and a heap entry whose
due time no longer matches the map is stale and dropped when it reaches the top (lazy
deletion). When stale entries outnumber live ones the heap is rebuilt from the map, so the
heap's size stays within twice the live count plus a small constant: memory is
proportional to what is in the set, whatever the churn. A popped job id is a hint, not a
verdict: the engine still decides ``TimerFired`` against the projection's state, and a job
that was cancelled or rescheduled meanwhile yields no event.

Failover. The hot set belongs to one ownership epoch and is never persisted. A new owner
starts an empty ``HotSet``, runs a promotion sweep (``last_promoted_until_us=None``) that
loads ``(now - sweep_interval, now + horizon]`` from the disk index, and an overdue sweep
over everything due at or before ``now - sweep_interval`` — call both with the same
``now_us`` so the two slices tile the time line. Jobs that came due while no one owned the
partition are therefore fired at takeover. The overdue sweep then repeats every
``overdue_sweep_interval_us`` as a safety net (a lost pop, a write that failed, a clock that
jumped forward past the horizon) and right away whenever the promotion sweep left a hole.
It only looks at what the hot set should have fired at least one sweep interval ago, so in
a healthy engine it finds nothing, and the number it finds is a figure worth alerting on.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from engine.errors import ConfigError

MS = 1_000
SECOND = 1_000_000
COMPACT_SLACK = 64
"""Stale heap entries tolerated beyond the live count before the heap is rebuilt."""


class Band(StrEnum):
    """Where a job waits until it is due: the time router's band of due times (not a command's route)."""

    READY = "READY"
    HOT = "HOT"
    COLD = "COLD"


@dataclass(frozen=True, slots=True)
class Windows:
    """The time router's windows, in microseconds; the source of truth for what is "soon".

    - ``immediate_us`` (default 0): a job due within this much of now is queued at once.
      A positive value saves one timer hop for jobs due a few ms ahead, at the price of
      starting them up to that much early; the default never starts a job early.
    - ``horizon_us`` (default 60 s): jobs due within this much of now are held in memory.
      RAM grows with the jobs due in this window, never with all future jobs.
    - ``sweep_interval_us`` (default 1 s): how often the promotion sweep tops up the hot set;
      must be shorter than the horizon, so every job is in memory before it is due.
    - ``overdue_sweep_interval_us`` (default 30 s): how often the safety-net sweep runs.
    """

    immediate_us: int = 0
    horizon_us: int = 60 * SECOND
    sweep_interval_us: int = 1 * SECOND
    overdue_sweep_interval_us: int = 30 * SECOND

    def __post_init__(self) -> None:
        for name in ("immediate_us", "horizon_us", "sweep_interval_us", "overdue_sweep_interval_us"):
            _require_int(name, getattr(self, name))
        if self.immediate_us < 0:
            raise ConfigError(f"windows.immediate_us: must be >= 0, got {self.immediate_us}")
        if self.horizon_us <= self.immediate_us:
            raise ConfigError(f"windows.horizon_us: must exceed immediate_us ({self.immediate_us}), "
                              f"got {self.horizon_us}")
        if not 0 < self.sweep_interval_us < self.horizon_us:
            raise ConfigError(f"windows.sweep_interval_us: must be > 0 and < horizon_us ({self.horizon_us}), "
                              f"got {self.sweep_interval_us}")
        if self.overdue_sweep_interval_us <= 0:
            raise ConfigError(f"windows.overdue_sweep_interval_us: must be > 0, got {self.overdue_sweep_interval_us}")


def _require_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"windows.{name}: must be an int (microseconds), got {type(value).__name__}")


def band_of(due_at_us: int, now_us: int, windows: Windows) -> Band:
    """Where a job due at ``due_at_us`` waits, seen at ``now_us`` (bands inclusive at the top)."""
    if due_at_us <= now_us + windows.immediate_us:
        return Band.READY
    if due_at_us <= now_us + windows.horizon_us:
        return Band.HOT
    return Band.COLD


class DueRange(NamedTuple):
    """A slice of the due-time index: due times in ``(after_us, until_us]``.

    To scan it in the store: from ``DUE + num(after_us + 1)`` inclusive to
    ``DUE + num(until_us + 1)`` exclusive (``projections.views.keys``).
    """

    after_us: int
    until_us: int

    @property
    def empty(self) -> bool:
        """Whether no due time falls in the slice."""
        return self.until_us <= self.after_us

    def covers(self, due_at_us: int) -> bool:
        """Whether ``due_at_us`` falls in the slice."""
        return self.after_us < due_at_us <= self.until_us


def _floor(now_us: int, windows: Windows) -> int:
    """Due times at or below this belong to the overdue sweep, above it to the hot set."""
    return now_us - windows.sweep_interval_us


def promotion_range(now_us: int, last_promoted_until_us: int | None, windows: Windows) -> DueRange:
    """The slice of the disk index a promotion sweep at ``now_us`` loads into the hot set.

    Normally ``(last_promoted_until, now + horizon]``. A fresh owner (``None``) or a sweep
    that fell behind by more than the horizon starts at ``now - sweep_interval`` instead:
    what lies below is overdue and is left to the overdue sweep, which streams it without
    holding it in memory (see ``overdue_sweep_due``). Never reaches below its start, so a
    clock that jumps backwards yields an empty slice rather than a reload.
    """
    floor = _floor(now_us, windows)
    after = floor if last_promoted_until_us is None else max(last_promoted_until_us, floor)
    return DueRange(after, max(after, now_us + windows.horizon_us))


def overdue_range(now_us: int, windows: Windows) -> DueRange:
    """The slice the safety-net sweep fires: still scheduled and due at or before ``now - sweep_interval``.

    The last sweep interval is left to the hot set, which holds those jobs since a
    promotion sweep at least one interval ago; the overdue sweep only finds what was missed.
    """
    return DueRange(-1, max(-1, _floor(now_us, windows)))


def promotion_sweep_due(now_us: int, last_promoted_until_us: int | None, windows: Windows) -> bool:
    """Whether the hot set's horizon has shrunk by a sweep interval (or was never filled)."""
    if last_promoted_until_us is None:
        return True
    return now_us + windows.horizon_us - last_promoted_until_us >= windows.sweep_interval_us


def overdue_sweep_due(now_us: int, last_overdue_sweep_us: int | None,
                      last_promoted_until_us: int | None, windows: Windows) -> bool:
    """Whether the safety-net sweep must run now: never ran, its interval passed, or a hole opened.

    A hole is a stretch of due times neither in the hot set nor left to the overdue sweep:
    the last promotion ended below the floor (engine stalled, clock jumped forward).
    """
    if last_overdue_sweep_us is None or now_us - last_overdue_sweep_us >= windows.overdue_sweep_interval_us:
        return True
    return last_promoted_until_us is None or last_promoted_until_us < _floor(now_us, windows)


class HotSet:
    """The in-memory timers of one partition: jobs due in ``(floor, horizon_end]``, earliest first.

    A min-heap of ``(due_at, job_id)`` with lazy deletion; ``_due`` maps each live job to its
    due time and is the truth. Pure: the engine passes ``now_us``. Not thread-safe.
    """

    __slots__ = ("_due", "_heap", "_horizon_end")

    def __init__(self, horizon_end_us: int = -1) -> None:
        self._heap: list[tuple[int, str]] = []
        self._due: dict[str, int] = {}
        self._horizon_end = horizon_end_us

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._due

    @property
    def horizon_end(self) -> int:
        """The due time up to which the set holds every scheduled job (top of the last promotion)."""
        return self._horizon_end

    @property
    def heap_size(self) -> int:
        """Heap entries, stale ones included; at most ``2 * len(self) + COMPACT_SLACK``."""
        return len(self._heap)

    def due_of(self, job_id: str) -> int | None:
        """The due time the set holds for ``job_id``, or None if it holds none."""
        return self._due.get(job_id)

    def add(self, due_at_us: int, job_id: str) -> bool:
        """Hold (or move) ``job_id``'s timer if it is due within the horizon; whether it is held.

        A job due after ``horizon_end`` is refused: it stays on disk and a later promotion
        sweep brings it in. Adding a job again with a new due time reschedules it.
        """
        if due_at_us > self._horizon_end:
            self.remove(job_id)
            return False
        if self._due.get(job_id) == due_at_us:
            return True
        self._due[job_id] = due_at_us
        heapq.heappush(self._heap, (due_at_us, job_id))
        self._compact_if_sparse()
        return True

    def remove(self, job_id: str) -> bool:
        """Forget ``job_id``'s timer (cancelled, rescheduled beyond the horizon, or fired); whether it was held."""
        if self._due.pop(job_id, None) is None:
            return False
        self._compact_if_sparse()
        return True

    def promote(self, entries: Iterable[tuple[int, str]], until_us: int) -> int:
        """Raise ``horizon_end`` to ``until_us`` and hold the loaded ``(due_at, job_id)`` entries; how many were new.

        ``entries`` is the disk slice ``promotion_range`` named, whole: a slice cut inside
        one due time would let its rest fall below the next slice's exclusive start.
        """
        self._horizon_end = max(self._horizon_end, until_us)
        before = len(self._due)
        for due_at_us, job_id in entries:
            self.add(due_at_us, job_id)
        return len(self._due) - before

    def pop_due(self, now_us: int, limit: int) -> list[str]:
        """Take out up to ``limit`` jobs due at or before ``now_us``, by due time then job id."""
        popped: list[str] = []
        while self._heap and len(popped) < limit and self._heap[0][0] <= now_us:
            due_at_us, job_id = heapq.heappop(self._heap)
            if self._due.get(job_id) == due_at_us:
                del self._due[job_id]
                popped.append(job_id)
        return popped

    def next_due_us(self) -> int | None:
        """The earliest due time held, or None when empty (drops stale entries off the top)."""
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def _compact_if_sparse(self) -> None:
        if len(self._heap) > 2 * len(self._due) + COMPACT_SLACK:
            self._heap = [(due, job_id) for job_id, due in self._due.items()]
            heapq.heapify(self._heap)
