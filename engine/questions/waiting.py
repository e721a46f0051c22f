"""Waiting for many jobs' outcomes at once: the one reader behind ``wait``, ``wait_all`` and ``as_completed``.

Each events partition is read once from the earliest start among the jobs awaited in it;
every record is routed by its key to its job's outcome, and ownership claims (no key) feed
the partition's fencing verdicts. A client keeps one reader for all its waits, so a
finished job's ``wait()`` costs an assignment and one fetch, not a new consumer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.domain import fence
from engine.domain.pauses import TASK_ENVELOPE
from engine.errors import DecodeError
from engine.runtime.kafka.ports import Record, TopicReader, topic_reader
from engine.questions.holdups import Holdups, projection_source
from engine.questions.history import LoggedEvent
from engine.questions.outcome import Outcome

BATCH = 1000
FETCH_WAIT_MS = 5
"""The reader's fetch.wait.max.ms: a new assignment joins the next fetch, at most this long from now."""
PAUSES = TASK_ENVELOPE.encode()
"""The key prefix of a task type's pause and resume events (their job id is the task type's envelope)."""
MAX_WAIT_S = 0.1
"""The longest one poll blocks (it returns with the first record): how often the deadline is looked at."""


@dataclass(frozen=True, slots=True)
class Awaited:
    """One job a wait is for: its events partition and an offset at or before its first event to read."""

    job_id: str
    partition: int
    start: int
    command_id: str | None = None  # the command whose answer is awaited (a duplicate submit is told by it)


Until = Callable[[Outcome], bool]
Watch = Callable[[Outcome], None]


def finished(outcome: Outcome) -> bool:
    """A job's wait is over: it is final, or it was a duplicate submission (its history is older)."""
    return outcome.done or (outcome.duplicate and outcome.status == "submitted")


def decided(outcome: Outcome) -> bool:
    """A command's wait is over: the job is final, or a command about it was refused since the wait began."""
    return outcome.done or outcome.refusal is not None


class _Partition:
    """The fencing state of one partition a wait reads: the newest claim, and the next offset expected."""

    __slots__ = ("claim", "next", "known", "start")

    def __init__(self, start: int, claim: tuple[int, int] | None = None) -> None:
        """``claim``: (where to read from, the newest valid claim before there) when a view knows it (exact: the
        records before ``start`` only move the fence); otherwise the first event read stands in (``verdict``)."""
        self.next, self.claim = claim if claim is not None else (start, 0)
        self.known, self.start = claim is not None, start

    def verdict(self, event: m.Event) -> bool | None:
        """Whether ``event`` is fenced (None for a claim, which only moves the fence)."""
        if isinstance(event.body, m.OwnershipClaimed):
            if fence.claim_counts(event.epoch, self.claim):
                self.claim = event.epoch
            return None
        if self.claim == 0 and not self.known:  # mid-log, no view to ask: the first epoch stands in
            self.claim = event.epoch
        return not fence.counts(event.epoch, self.claim)


class Waiter:
    """A client's events reader for waits: one reader, reused; a concurrent wait gets a reader of its own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._reader: TopicReader | None = None
        self._lock = threading.Lock()

    def wait(self, jobs: Sequence[Awaited], timeout: float, until: Until = finished,
               watch: Watch | None = None) -> Iterator[Outcome]:
        """Each job's outcome as soon as ``until`` holds for it; at the deadline, the others as they stand.

        ``watch`` is called with a job's outcome whenever its status changes, and when a queued
        job is found held (``outcome.held``: its task type's breaker is open, or it is paused).
        """
        if not jobs:
            return
        shared = self._lock.acquire(blocking=False)
        reader = self._shared() if shared else _waiting_reader(self.settings)
        holdups = Holdups(projection_source(self.settings)) if watch is not None else None
        try:
            yield from _Wait(reader, self.settings.events_topic, jobs, until, watch, holdups,
                            self._fences).run(timeout)
        finally:
            if shared:
                reader.unassign()
                self._lock.release()
            else:
                reader.close()

    def _fences(self, partition: int, start: int) -> tuple[int, int] | None:
        from engine.questions.stores import fence_at

        return fence_at(self.settings, partition, start)

    def _shared(self) -> TopicReader:
        if self._reader is None:
            self._reader = _waiting_reader(self.settings)
        return self._reader

    def close(self) -> None:
        """Release the reader."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _waiting_reader(settings: Settings) -> TopicReader:
    """A reader of the events for waits: a refused read says the command was sent but its outcome is unreadable."""
    return topic_reader(settings, "wait", FETCH_WAIT_MS, waiter=True)


class _Wait:
    """One wait: the outcomes of its jobs, folded from the records read since their starts."""

    def __init__(self, reader: TopicReader, topic: str, jobs: Sequence[Awaited], until: Until,
                 watch: Watch | None, holdups: Holdups | None = None,
                 fences: Callable[[int, int], tuple[int, int] | None] | None = None) -> None:
        """``fences(partition, start)``: where to read ``partition`` from and the newest valid claim before there,
        when a view knows them (``stores.fence_at``)."""
        self.reader, self.topic, self.until, self.watch, self.holdups = reader, topic, until, watch, holdups
        self.outcomes = {j.job_id: Outcome(j.job_id, command_id=j.command_id) for j in jobs}
        self.partition_of = {j.job_id: j.partition for j in jobs}
        self.keys = {j.job_id.encode(): j.job_id for j in jobs}
        starts: dict[int, int] = {}
        for job in jobs:
            starts[job.partition] = min(job.start, starts.get(job.partition, job.start))
        self.partitions = {p: _Partition(start, fences(p, start) if fences is not None and start > 0 else None)
                           for p, start in starts.items()}
        self.pending = set(self.outcomes)

    def run(self, timeout: float) -> Iterator[Outcome]:
        self.reader.assign(self.topic, {p: s.next for p, s in self.partitions.items()})
        deadline = time.monotonic() + timeout
        while self.pending and (remaining := deadline - time.monotonic()) > 0:
            yield from self._take(self.reader.read_soon(BATCH, min(remaining, MAX_WAIT_S)))
            if self.holdups is not None and self.holdups.due() and self._queued() and self.holdups.refresh():
                self._recheck(self.pending)
        for job_id in sorted(self.pending):
            yield self.outcomes[job_id]

    def _take(self, records: list[Record]) -> Iterator[Outcome]:
        for record in records:
            logged = self._relevant(record)
            if logged is None:
                continue
            job_id = logged.event.job_id or ""
            outcome = self.outcomes[job_id]
            before = outcome.status
            outcome.apply(logged)
            if self.watch is not None and outcome.status != before:
                outcome.held = None
                self._recheck([job_id], quiet=True)
                self.watch(outcome)
            if job_id in self.pending and self.until(outcome):
                self.pending.discard(job_id)
                yield outcome

    def _relevant(self, record: Record) -> LoggedEvent | None:
        """The record as an event of an awaited job, with its fencing verdict; None for any other record."""
        offset, p = record.offset(), record.partition()
        state = self.partitions.get(p)  # type: ignore[arg-type]
        if state is None or offset is None or offset < state.next:
            return None
        state.next = offset + 1
        key = record.key()
        if key is not None and key not in self.keys and not (self.holdups is not None and key.startswith(PAUSES)):
            return None
        try:
            event = decode_event_at(record.value(), self.topic, p, offset)  # type: ignore[arg-type]
        except DecodeError:
            return None
        fenced = state.verdict(event)
        if fenced is None or offset < state.start:  # a claim, or a record read only for the claims before the start
            return None
        if (not fenced and self._holdup(p, event)) or event.job_id not in self.outcomes:  # type: ignore[arg-type]
            return None
        return LoggedEvent(offset, event, fenced)

    def _queued(self) -> bool:
        """Whether a job still awaited waits in a queue (what holds it is then worth reading again)."""
        return any(self.outcomes[job_id].status == "queued" for job_id in self.pending)

    def _holdup(self, partition: int, event: m.Event) -> bool:
        """Take a breaker or pause event into account (and tell the jobs it holds); whether it was one."""
        if self.holdups is None or not self.holdups.see(partition, event):
            return False
        self._recheck(self.pending)
        return True

    def _recheck(self, job_ids: Iterable[str], quiet: bool = False) -> None:
        """Work out again what holds each queued job of ``job_ids``; tell the watch of a new holdup (unless ``quiet``:
        the caller tells it with the change of status)."""
        if self.holdups is None:
            return
        now = int(time.time() * 1e6)
        for job_id in list(job_ids):
            outcome = self.outcomes[job_id]
            held = self.holdups.why(outcome.task_type, self.partition_of[job_id], now) \
                if outcome.status == "queued" else None
            if held == outcome.held:
                continue
            outcome.held = held
            if held is not None and not quiet and self.watch is not None:
                self.watch(outcome)
