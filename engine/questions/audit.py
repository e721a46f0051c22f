"""A tenant's audit trail, read from ``<ns>.events`` itself: the events always come from the log.

Every partition is scanned from offset 0 up to its end as it was when the export started, in
log order (partition by partition, offset by offset), with the fold's fencing verdicts
(:func:`engine.questions.history.with_fencing`, the same as ``epochq history``). An event is
exported when its job belongs to the tenant (and has the task type, when one is asked for) and
it occurred in ``[since, until)``. Where the state directory holds a partition's store with a
tenant index, only the offsets it names for the tenant's jobs are read (with the store's
verdicts), and the log after the store's offset is scanned: the same export, since the index
follows the same rule of whose a job is. Without a store, an audit works after a projection
directory was deleted, and it is what a rebuild would see.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.errors import DecodeError, KafkaUnavailableError, RetryableError
from engine.runtime.kafka.ports import TopicReader, topic_reader
from engine.questions.history import LoggedEvent, keyed, read_at, with_fencing, with_traces
from engine.runtime.topics import partition_count

if TYPE_CHECKING:
    from engine.questions.stores import TenantIndex

Progress = Callable[[int, int], None]
"""Called with (offsets read so far, offsets to read in all, over every partition) while an audit runs."""

PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which events an audit exports: the jobs of one tenant (of one task type), within [since, until)."""

    tenant: str
    task_type: str | None = None
    since_us: int | None = None
    until_us: int | None = None

    def in_range(self, occurred_at: int) -> bool:
        """Whether an event time (µs since the epoch) falls in [since, until)."""
        return ((self.since_us is None or occurred_at >= self.since_us)
                and (self.until_us is None or occurred_at < self.until_us))


@dataclass(frozen=True, slots=True)
class AuditedEvent:
    """One exported event: its partition, offset, fencing verdict and the event itself."""

    partition: int
    logged: LoggedEvent


@dataclass
class AuditSummary:
    """What an audit exported and read: the numbers of its summary line."""

    events: int = 0
    fenced: int = 0
    jobs: set[str] = field(default_factory=set)
    partitions: int = 0
    indexed: int = 0
    records: int = 0
    undecodable: int = 0

    def count(self, audited: AuditedEvent) -> None:
        """Take one exported event into account."""
        self.events += 1
        self.fenced += audited.logged.fenced
        self.jobs.add(audited.logged.event.job_id or "")

    def line(self) -> str:
        """``12 events of 3 jobs, 0 fenced writes (read 140 records in 3 partitions)``."""
        skipped = f", {self.undecodable} undecodable skipped" if self.undecodable else ""
        indexed = f", {self.indexed} through the tenant index" if self.indexed else ""
        return (f"{self.events} events of {len(self.jobs)} jobs, {self.fenced} fenced writes "
                f"(read {self.records} records in {self.partitions} partitions{indexed}{skipped})")


class _Jobs:
    """Whose each job is and what it runs, learnt while scanning (JobSubmitted / JobRejected say it)."""

    def __init__(self) -> None:
        self.tenant: dict[str, str] = {}
        self.task_type: dict[str, str] = {}

    def learn(self, event: m.Event) -> None:
        """Remember the job's tenant and task type from the event that created (or refused) it."""
        if event.job_id is not None and isinstance(event.body, (m.JobSubmitted, m.JobRejected)):
            self.task_type.setdefault(event.job_id, event.body.task_type)
            self.tenant.setdefault(event.job_id, event.tenant_id or "")

    def matches(self, event: m.Event, flt: AuditFilter) -> bool:
        """Whether the event's job is the tenant's (and of the task type).

        A job's tenant is the one it was submitted by, whatever later commands about it say (a
        CancelJob may carry none). An event of a job not submitted (yet), such as a refused
        CancelJob, counts by its own tenant.
        """
        if event.job_id is None:
            return False
        if self.tenant.get(event.job_id, event.tenant_id) != flt.tenant:
            return False
        return flt.task_type is None or self.task_type.get(event.job_id) == flt.task_type


def audit_events(settings: Settings, flt: AuditFilter, summary: AuditSummary | None = None,
                 progress: Progress | None = None) -> Generator[AuditedEvent, None, None]:
    """Every event of the matching jobs, partition by partition in log order, up to the ends as of now."""
    summary = summary if summary is not None else AuditSummary()
    with topic_reader(settings, "audit") as reader:
        count = _partition_count(settings)
        ends = reader.end_offsets(settings.events_topic, range(count))
        summary.partitions = count
        meter = _Meter(ends, progress)
        earlier = _Earlier(settings)
        for p in range(count):
            index = _tenant_index(settings, p, flt.tenant)
            if index is not None:
                summary.indexed += 1
                logged = _indexed(reader, settings.events_topic, p, index, ends[p], summary, meter)
                try:
                    yield from matching_events(p, earlier.prefixed(p, logged, index.jobs, flt.tenant), flt, summary)
                finally:
                    logged.close()  # its reads unassign: before the reader closes, even when the caller stops early
                continue
            traces: dict[int, str] = {}
            scan = reader.scan_records(settings.events_topic, p, 0, ends[p])
            try:
                events = _decoded(keyed(scan, traces), settings.events_topic, p, summary, meter)
                yield from matching_events(p, with_traces(with_fencing(events, None), traces), flt, summary)
            finally:
                scan.close()  # unassigns: before the reader closes, even when the caller stops early
        meter.done()
        earlier.close()


def _tenant_index(settings: Settings, p: int, tenant: str) -> TenantIndex | None:
    from engine.questions.stores import tenant_index  # the projections, read-only, only when a state dir has them

    return tenant_index(settings, p, tenant)


def _indexed(reader: TopicReader, topic: str, p: int, index: TenantIndex, end: int, summary: AuditSummary,
             meter: _Meter) -> Generator[LoggedEvent, None, None]:
    """The indexed jobs' events (read at their offsets, with the store's verdicts), then the log after the store."""
    fenced = {offset for offset, verdict in index.entries if verdict == "fenced"}
    traces: dict[int, str] = {}
    read = reader.records_at(topic, p, [offset for offset, _ in index.entries])
    try:
        for offset, event in _decoded(keyed(read, traces), topic, p, summary, meter):
            yield LoggedEvent(offset, event, offset in fenced, traces.pop(offset, None))
    finally:
        read.close()
    tail = reader.scan_records(topic, p, index.applied_offset + 1, end)
    try:
        events = _decoded(keyed(tail, traces), topic, p, summary, meter)
        yield from with_traces(with_fencing(events, None, claim=index.epoch), traces)
    finally:
        tail.close()


class _Earlier:
    """Reads, for the log after a store, the earlier events of jobs the tenant index does not list.

    A job outside the tenant's index can still be the tenant's in the events after the store's
    offset: submitted there, or named there by a command of the tenant's. Its events before the
    store's offset (from the job's history index) say whose it is, as a full scan would know.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self._reader: TopicReader | None = None

    def prefixed(self, p: int, logged: Iterable[LoggedEvent], listed: frozenset[str],
                 tenant: str) -> Iterator[LoggedEvent]:
        """``logged``, each unlisted job's earlier events put before its first event of ``tenant``."""
        looked: set[str] = set()
        for item in logged:
            job, event = item.event.job_id, item.event
            if job is not None and job not in listed and job not in looked and event.tenant_id == tenant:
                looked.add(job)
                yield from self._before(p, job, item.offset)
            yield item

    def _before(self, p: int, job_id: str, offset: int) -> list[LoggedEvent]:
        from engine.questions.stores import history_entries

        entries = [(o, v) for o, v in history_entries(self.settings, p, job_id) if o < offset]
        if not entries:
            return []
        if self._reader is None:
            self._reader = topic_reader(self.settings, "audit-earlier")
        return read_at(self._reader, self.settings.events_topic, p, entries)

    def close(self) -> None:
        """Release the reader, if one was needed."""
        if self._reader is not None:
            self._reader.close()


def _partition_count(settings: Settings) -> int:
    try:
        return partition_count(settings)
    except RetryableError as e:
        raise KafkaUnavailableError(f"cannot read the partitions of {settings.events_topic}: {e}") from e


def matching_events(p: int, logged: Iterable[LoggedEvent], flt: AuditFilter,
                    summary: AuditSummary) -> Iterator[AuditedEvent]:
    """Decides which of one partition's events (from offset 0, fencing applied) the audit exports."""
    jobs = _Jobs()
    for item in logged:
        jobs.learn(item.event)
        if jobs.matches(item.event, flt) and flt.in_range(item.event.occurred_at):
            audited = AuditedEvent(p, item)
            summary.count(audited)
            yield audited


def _decoded(records: Iterable[tuple[int, bytes | None, bytes]], topic: str, p: int, summary: AuditSummary,
             meter: _Meter) -> Iterator[tuple[int, m.Event]]:
    """The decodable events among the records; undecodable ones are counted and skipped."""
    for offset, _key, value in records:
        summary.records += 1
        meter.at(p, offset)
        try:
            yield offset, decode_event_at(value, topic, p, offset)
        except DecodeError:
            summary.undecodable += 1


class _Meter:
    """Reports progress in offsets (transaction markers take offsets too) every PROGRESS_EVERY_S, and at the end."""

    def __init__(self, ends: dict[int, int], progress: Progress | None):
        self.ends, self.progress = ends, progress
        self.total = sum(ends.values())
        self._last = time.monotonic()

    def at(self, partition: int, offset: int) -> None:
        if self.progress is not None and time.monotonic() - self._last >= PROGRESS_EVERY_S:
            self._last = time.monotonic()
            done = sum(end for p, end in self.ends.items() if p < partition)
            self.progress(done + offset + 1, self.total)

    def done(self) -> None:
        if self.progress is not None:
            self.progress(self.total, self.total)
