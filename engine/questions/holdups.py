"""What keeps a queued job from starting, as someone waiting for it can tell: its task type's open breaker, a pause,
a rate limit, or a remote pool no worker serves (the heartbeats on ``<ns>.workers`` say which).

A waiter learns it from two sources. The projections of the state directory, when there are
any (an engine's or a standby's on this machine), say how every breaker and pause stands now;
they are read when the wait starts and again every few seconds while a job waits. The breaker
and pause events the waiter reads in the job's partition say what changed since. A breaker is
an engine instance's, shared by the partitions it owns, and recorded in the partition of the
attempt that tripped it, so the newest breaker event of a task type in any partition counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from engine.config import Settings
from engine.errors import EpochqError
from engine.contract import messages as m
from engine.contract.heartbeat import WorkerRow
from engine.domain.breaker import BreakerStatus

REFRESH_S = 2.0
"""How often the state directory's projections are read again while an awaited job waits in a queue."""


@dataclass(frozen=True, slots=True)
class OpenBreaker:
    """One task type's breaker as last seen: open until ``reopen_at`` (µs), or not open (``reopen_at`` None)."""

    since: int
    reopen_at: int | None


@dataclass
class Snapshot:
    """How breakers and pauses stand in the projections: newest breaker per task type, pauses per partition."""

    breakers: dict[str, OpenBreaker] = field(default_factory=dict)
    paused: dict[tuple[int, str], str] = field(default_factory=dict)  # (partition, task type) -> reason
    partitions: frozenset[int] = frozenset()  # the partitions the projections read cover
    limited: dict[tuple[int, str], float] = field(default_factory=dict)  # (partition, task type) -> starts/s
    unserved: dict[str, str] = field(default_factory=dict)  # task type -> its remote pool, which no live worker serves


Source = Callable[[], Snapshot]


class Holdups:
    """Open breakers and paused task types, from the projections and from events read live. Decides ``why``."""

    def __init__(self, source: Source | None = None, refresh_s: float = REFRESH_S) -> None:
        self._source, self._refresh_s = source, refresh_s
        self._read_at = -float("inf")
        self.now = Snapshot()
        self.refresh()

    def due(self) -> bool:
        """Whether a :meth:`refresh` would read the projections again now."""
        return self._source is not None and time.monotonic() - self._read_at >= self._refresh_s

    def refresh(self) -> bool:
        """Read the projections again if ``refresh_s`` passed since the last read; whether anything changed.

        A breaker read there replaces the one known if it is as new or newer; the pauses of the
        partitions the projections cover replace those known (the others keep what was read live)."""
        source = self._source
        if source is None or not self.due():
            return False
        self._read_at = time.monotonic()
        fresh = source()
        breakers = dict(self.now.breakers)
        breakers.update((t, b) for t, b in fresh.breakers.items() if b.since >= self._since(t))
        paused = {key: why for key, why in self.now.paused.items() if key[0] not in fresh.partitions}
        limited = {key: rate for key, rate in self.now.limited.items() if key[0] not in fresh.partitions}
        new = Snapshot(breakers, {**paused, **fresh.paused}, self.now.partitions | fresh.partitions,
                       {**limited, **fresh.limited}, fresh.unserved)
        changed, self.now = new != self.now, new
        return changed

    def see(self, partition: int, event: m.Event) -> bool:
        """Take a breaker or pause event read in ``partition`` into account; whether it was one."""
        body = event.body
        if isinstance(body, m.BreakerOpened):
            self._breaker(body.task_type, OpenBreaker(event.occurred_at, body.reopen_at))
        elif isinstance(body, (m.BreakerHalfOpened, m.BreakerClosed)):
            self._breaker(body.task_type, OpenBreaker(event.occurred_at, None))
        elif isinstance(body, m.TaskTypePaused):
            self.now.paused[(partition, body.task_type)] = body.reason
        elif isinstance(body, m.TaskTypeResumed):
            self.now.paused.pop((partition, body.task_type), None)
        elif isinstance(body, m.RateLimitSet):
            self.now.limited[(partition, body.task_type)] = body.rate
        elif isinstance(body, m.RateLimitCleared):
            self.now.limited.pop((partition, body.task_type), None)
        else:
            return False
        return True

    def why(self, task_type: str | None, partition: int, now_us: int) -> str | None:
        """What holds a queued job of ``task_type`` in ``partition`` at ``now_us``; None when nothing known does."""
        if task_type is None:
            return None
        if (partition, task_type) in self.now.paused:
            reason = self.now.paused[(partition, task_type)]
            return f"paused: task type {task_type} is paused" + (f" ({reason})" if reason else "")
        breaker = self.now.breakers.get(task_type)
        if breaker is not None and breaker.reopen_at is not None and breaker.reopen_at > now_us:
            return f"breaker open for {task_type} until {clock(breaker.reopen_at)}"
        rate = self.now.limited.get((partition, task_type))
        if rate is not None:
            return f"rate limited: task type {task_type} starts at most {rate:g}/s"
        pool = self.now.unserved.get(task_type)
        if pool is not None:
            return f"waiting for a worker of pool {pool}"
        return None

    def _breaker(self, task_type: str, seen: OpenBreaker) -> None:
        if seen.since >= self._since(task_type):
            self.now.breakers[task_type] = seen

    def _since(self, task_type: str) -> int:
        old = self.now.breakers.get(task_type)
        return old.since if old is not None else -1


def clock(us: int) -> str:
    """A time in µs as ``HH:MM:SS UTC`` (the waits it names are seconds to minutes long)."""
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%H:%M:%S UTC")


def from_records(breakers: list[tuple[str, BreakerStatus, int, int | None]],
                 paused: list[tuple[int, str, str]], partitions: frozenset[int],
                 limited: Sequence[tuple[int, str, float]] = ()) -> Snapshot:
    """A snapshot from breaker rows (task type, status, since, reopen_at), pause rows (partition, type, reason),
    the partitions they were read from and rate-limit rows (partition, type, starts/s)."""
    return Snapshot({t: OpenBreaker(since, reopen if status is BreakerStatus.OPEN else None)
                     for t, status, since, reopen in breakers},
                    {(p, t): reason for p, t, reason in paused}, partitions,
                    {(p, t): rate for p, t, rate in limited})


def unserved(rows: Sequence[WorkerRow]) -> dict[str, str]:
    """The task types the live engines send to a remote pool that no live worker serves: type -> pool. Pure."""
    live = [r for r in rows if not r.lost]
    served = {r.pool for r in live if r.pool is not None and any(s.used + s.free for s in r.slots)}
    return {t: p for r in live if r.pool is None for t, p in r.pools.items() if p not in served}


def projection_source(settings: Settings) -> Source:
    """The ``Source`` reading the projections of ``settings.state_dir`` (an empty snapshot without any), and the
    heartbeats for the pools no worker serves."""
    from engine.questions.holdup_rows import holdup_rows
    from engine.questions.workers import list_workers

    def read() -> Snapshot:
        rows = holdup_rows(settings)
        snapshot = from_records([(r.task_type, r.status, r.since, r.reopen_at) for r in rows.breakers],
                                [(p, r.task_type, r.reason) for p, r in rows.paused], rows.partitions,
                                [(p, r.task_type, r.bucket.rate) for p, r in rows.limited])
        try:
            snapshot.unserved = unserved(list_workers(settings))
        except EpochqError:  # the heartbeats cannot be read: nothing known holds a job for want of a worker
            pass
        return snapshot
    return read
