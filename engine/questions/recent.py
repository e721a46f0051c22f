"""What happened in the last minutes, from the log: outcomes and start lateness per task type.

The console's overview asks this every few seconds, so a :class:`RecentWindow` follows the
events topic: its first read starts each partition at the first offset written at or after the
window's start (Kafka's time index), every later read takes only the events written since, and
what it keeps is one tally per minute (outcomes counted, lateness in buckets 2 % wide), so a
read costs the events that arrived since the last one and memory is bounded by minutes × task
types, never by jobs. A zombie's late writes are fenced as the fold fences them. A job's task
type comes from the state directory's store when it has the job (an engine's, or a standby's),
else from a ``JobSubmitted`` read before, else it is ``unknown``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.domain import fence
from engine.errors import DecodeError, ValidationError
from engine.runtime.kafka.ports import TopicReader, topic_reader
from engine.questions.history import with_fencing
from engine.questions.lateness import first_offsets, open_store, task_type_of
from engine.questions.stores import partition_dirs
from projections.store import ProjectionStore

OUTCOMES = {m.JobSucceeded: "succeeded", m.JobFailed: "failed", m.JobDeadLettered: "dead"}
"""The events counted per task type, and the column each one counts in."""
MINUTE_US = 60_000_000
RATIO = 1.02
"""Lateness buckets: each 2 % wider than the one below, so a percentile read from them is within 2 %."""
IDLE_S = 1.0
"""How long a read waits for records it knows are there (committed, their markers not yet read) before answering."""
REJECTIONS_KEPT = 1000
"""Rejections a window remembers (the newest)."""
KINDS_KEPT = 100_000
"""Task types of jobs submitted, remembered for the jobs no store knows (the oldest forgotten first)."""


def bucket_of(lateness_us: int) -> int:
    """The lateness bucket of a value (µs): 0 holds 0 and below, bucket b holds (RATIO^(b-1), RATIO^b]."""
    return 0 if lateness_us <= 0 else max(1, math.ceil(math.log(lateness_us) / math.log(RATIO)))


def bucket_value(bucket: int) -> int:
    """The value (µs) a bucket stands for: its upper edge."""
    return 0 if bucket <= 0 else round(RATIO ** bucket)


def quantile(buckets: Counter[int], q: float) -> int:
    """The q-th percentile (0..100) of the values tallied in ``buckets``, by nearest rank, as its bucket's value."""
    total = sum(buckets.values())
    if not total:
        raise ValidationError("percentile of no values", "values")
    rank, seen = max(1, math.ceil(q * total / 100)), 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            return bucket_value(bucket)
    return bucket_value(max(buckets))


@dataclass
class Tally:
    """What happened in one minute: outcomes and lateness buckets per task type."""

    outcomes: dict[str, Counter[str]] = field(default_factory=dict)
    lateness: dict[str, Counter[int]] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        """Fold ``other`` into this tally."""
        for kind, counts in other.outcomes.items():
            self.outcomes.setdefault(kind, Counter()).update(counts)
        for kind, buckets in other.lateness.items():
            self.lateness.setdefault(kind, Counter()).update(buckets)


@dataclass(frozen=True)
class Rejection:
    """One submission refused at admission (``JobRejected``): such a job has no record in any projection."""

    at_us: int
    job_id: str
    tenant: str
    task_type: str
    reason: str
    detail: str


@dataclass(frozen=True)
class RecentActivity:
    """Per task type: outcomes counted and lateness tallied over the minutes since ``since_us``; each minute's
    tally (by minute: µs since the epoch // MINUTE_US), and the newest rejections (newest first)."""

    since_us: int
    tally: Tally
    minutes: dict[int, Tally] = field(default_factory=dict)
    rejected: tuple[Rejection, ...] = ()

    def last(self, since_us: int) -> RecentActivity:
        """The same activity over the minutes from ``since_us`` on only."""
        first = since_us // MINUTE_US
        kept = {minute: tally for minute, tally in self.minutes.items() if minute >= first}
        total = Tally()
        for tally in kept.values():
            total.add(tally)
        return RecentActivity(first * MINUTE_US, total, kept,
                              tuple(r for r in self.rejected if r.at_us >= since_us))

    def rows(self) -> list[tuple[str, Counter[str], Counter[int]]]:
        """(task type, outcomes, lateness buckets) of every task type seen, by task type."""
        kinds = sorted(set(self.tally.outcomes) | set(self.tally.lateness))
        return [(k, self.tally.outcomes.get(k, Counter()), self.tally.lateness.get(k, Counter())) for k in kinds]

    def all_lateness(self) -> Counter[int]:
        """The lateness buckets of every task type together."""
        out: Counter[int] = Counter()
        for buckets in self.tally.lateness.values():
            out.update(buckets)
        return out


def _copied(tally: Tally) -> Tally:
    """A copy a reader may keep while the window goes on counting into the original."""
    copy = Tally()
    copy.add(tally)
    return copy


class LazyStore:
    """A partition's store, opened read-only the first time a job's task type is not known otherwise
    (opening one costs tens of milliseconds: a read with nothing new opens none)."""

    def __init__(self, path: Path | None):
        self.path, self.store, self.tried = path, None, False  # type: Path | None, ProjectionStore | None, bool

    def opened(self) -> ProjectionStore | None:
        """The store, opened now if not yet; None without one."""
        if not self.tried:
            self.store, self.tried = open_store(self.path), True
        return self.store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self.store is not None:
            self.store.close()


class RecentWindow:
    """Follows ``<ns>.events`` and keeps per-minute tallies of the last ``window_s`` seconds; thread-safe."""

    def __init__(self, settings: Settings, window_s: int = 15 * 60):
        self.settings, self.window_us = settings, window_s * 1_000_000
        self._lock = threading.Lock()
        self._reader: TopicReader | None = None
        self._next: dict[int, int] = {}  # partition -> the next offset to read
        self._claims: dict[int, int] = {}  # partition -> the newest valid claim read (0: none yet)
        self._minutes: dict[int, Tally] = {}  # minute (µs since the epoch // MINUTE_US) -> tally
        self._kinds: OrderedDict[str, str] = OrderedDict()
        self._rejected: deque[Rejection] = deque(maxlen=REJECTIONS_KEPT)

    def read(self, now_us: int) -> RecentActivity:
        """The tallies of the minutes in the window ending ``now_us``, after reading what arrived since."""
        since = now_us - self.window_us
        with self._lock:
            reader = self._reader or self._assigned(since)
            ends = reader.end_offsets(self.settings.events_topic, sorted(self._next))
            if not self._caught_up(reader, ends):  # nothing new: no fetch, no store opened
                self._read_to(reader, ends, since)
            return self._answer(since)

    def _read_to(self, reader: TopicReader, ends: dict[int, int], since_us: int) -> None:
        """Fold what the partitions hold up to ``ends``, then pause them again."""
        stores = {p: LazyStore(path) for p, path in partition_dirs(self.settings)}
        topic, assigned = self.settings.events_topic, sorted(self._next)
        reader.resume(topic, assigned)
        for p in assigned:
            # A seek wakes the client's fetcher, which a resume alone leaves asleep until its next wake-up (up to
            # a second: every refresh while jobs ran took 1 s; 60 ms with the seek).
            reader.seek(topic, p, self._next[p])
        try:
            self._drain(reader, ends, stores, since_us)
        finally:
            reader.pause(topic, assigned)  # between reads nothing is fetched, nor held in memory
            for store in stores.values():
                store.close()

    def _assigned(self, since_us: int) -> TopicReader:
        """A reader that stays assigned to every events partition, from the window's first offsets on."""
        reader = topic_reader(self.settings, "recent")
        topic = self.settings.events_topic
        self._next = first_offsets(reader, topic, reader.partitions(topic), since_us)
        reader.assign(topic, self._next)
        self._reader = reader
        return reader

    def _drain(self, reader: TopicReader, ends: dict[int, int], stores: dict[int, LazyStore], since_us: int) -> None:
        """Fold what arrived, up to the ends read before (transaction markers included), or until a second
        passes with nothing (an open transaction holds the rest back)."""
        last_seen = time.monotonic()
        while not self._caught_up(reader, ends) and time.monotonic() - last_seen < IDLE_S:
            batch = reader.read(5000, 0.05)
            if batch:
                last_seen = time.monotonic()
            by_partition: dict[int, list[tuple[int, bytes]]] = {}
            for msg in batch:
                by_partition.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))  # type: ignore[arg-type]
            for p, records in by_partition.items():
                self._fold(p, records, stores.get(p) or LazyStore(None), since_us)

    def _caught_up(self, reader: TopicReader, ends: dict[int, int]) -> bool:
        at = reader.positions(self.settings.events_topic, ends)
        return all(max(offset, self._next[p]) >= ends[p] for p, offset in at.items())

    def _fold(self, p: int, records: list[tuple[int, bytes]], store: LazyStore, since_us: int) -> None:
        mid_log = self._next[p] > 0 and p not in self._claims
        for logged in with_fencing(self._decoded(p, records), None, mid_log, self._claims.get(p, 0)):
            if not logged.fenced:
                self._count(logged.event, store, since_us)

    def _decoded(self, p: int, records: list[tuple[int, bytes]]) -> Iterator[tuple[int, m.Event]]:
        """The records' events; remembers where to go on and the newest valid claim."""
        topic = self.settings.events_topic
        for offset, value in records:
            self._next[p] = offset + 1
            try:
                event = decode_event_at(value, topic, p, offset)
            except DecodeError:
                continue
            if isinstance(event.body, m.OwnershipClaimed) and fence.claim_counts(event.epoch, self._claims.get(p, 0)):
                self._claims[p] = event.epoch
            yield offset, event

    def _count(self, event: m.Event, store: LazyStore, since_us: int) -> None:
        body, job_id = event.body, event.job_id or ""
        if isinstance(body, m.JobSubmitted):
            self._remember(job_id, body.task_type)
            return
        if isinstance(body, m.JobRejected):
            if event.occurred_at >= since_us:
                self._rejected.append(Rejection(event.occurred_at, job_id, event.tenant_id or "", body.task_type,
                                                body.reason, body.detail))
            return
        outcome = OUTCOMES.get(type(body))
        if (outcome is None and not isinstance(body, m.JobStarted)) or event.occurred_at < since_us:
            return
        tally = self._minutes.setdefault(event.occurred_at // MINUTE_US, Tally())
        kind = self._kinds.get(job_id) or task_type_of(job_id, self._kinds, store.opened())
        if isinstance(body, m.JobStarted):
            tally.lateness.setdefault(kind, Counter())[bucket_of(event.occurred_at - body.due_at)] += 1
        elif outcome is not None:
            tally.outcomes.setdefault(kind, Counter())[outcome] += 1

    def _remember(self, job_id: str, task_type: str) -> None:
        self._kinds[job_id] = task_type
        if len(self._kinds) > KINDS_KEPT:
            self._kinds.popitem(last=False)

    def _answer(self, since_us: int) -> RecentActivity:
        first = since_us // MINUTE_US
        for minute in [mt for mt in self._minutes if mt < first]:
            del self._minutes[minute]
        total = Tally()
        for tally in self._minutes.values():
            total.add(tally)
        rejected = tuple(r for r in reversed(self._rejected) if r.at_us >= since_us)
        return RecentActivity(first * MINUTE_US, total, {mt: _copied(t) for mt, t in self._minutes.items()}, rejected)

    def close(self) -> None:
        """Release the Kafka client."""
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
