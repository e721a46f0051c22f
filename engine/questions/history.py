"""Reading one job's events straight from the log: for handles, status, history and audits."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.contract.headers import TRACEPARENT
from engine.contract.partitioner import partition_for
from engine.contract.validation import check_job_id
from engine.errors import DecodeError
from engine.domain import fence
from engine.runtime.kafka import header
from engine.runtime.kafka.ports import Record, TopicReader, topic_reader
from engine.runtime.kafka import scan_partition as scan_partition  # re-exported: where readers have imported it from
from engine.questions.logged import LoggedEvent as LoggedEvent  # re-exported: where readers have imported it from


def job_partition(settings: Settings, reader: TopicReader, job_id: str) -> int:
    """The partition of ``job_id`` (Java-compatible murmur2 over the events topic's count)."""
    return partition_for(job_id, len(reader.partitions(settings.events_topic)))


def job_events(settings: Settings, job_id: str, start: int = 0) -> list[LoggedEvent]:
    """Every event of one job from the log, in log order, each marked fenced or not.

    A scan from ``start`` > 0 fences with the newest valid claim before it as the state directory's view knows it
    (``stores.fence_at``); without a view, the first event's epoch stands in for it (``with_fencing``)."""
    from engine.questions.stores import fence_at

    with topic_reader(settings, "history") as reader:
        p = job_partition(settings, reader, job_id)
        known = fence_at(settings, p, start) if start > 0 else None
        if known is not None:  # read from the view's position on for the claims, keep the job's events from start
            scanned = _scanned(reader, settings.events_topic, p, job_id, known[0], claim=known[1])
            return [logged for logged in scanned if logged.offset >= start]
        return _scanned(reader, settings.events_topic, p, job_id, start, mid_log=start > 0)


def _scanned(reader: TopicReader, topic: str, p: int, job_id: str, start: int = 0, mid_log: bool = False,
             claim: int = 0) -> list[LoggedEvent]:
    """The job's events in the log from ``start`` on, with the fencing rule and their ``traceparent`` headers."""
    traces: dict[int, str] = {}
    records = keyed(reader.scan_records(topic, p, start), traces, job_id)
    return list(with_traces(with_fencing(_decoded(records, topic, p), job_id, mid_log, claim), traces))


def _decoded(records: Iterable[tuple[int, bytes | None, bytes]], topic: str, p: int) -> Iterator[tuple[int, m.Event]]:
    for offset, _key, value in records:
        try:
            yield offset, decode_event_at(value, topic, p, offset)
        except DecodeError:
            continue


def keyed(messages: Iterable[Record], traces: dict[int, str],
          job_id: str | None = None) -> Iterator[tuple[int, bytes | None, bytes]]:
    """(offset, key, value) of each record; the ``traceparent`` header of each that has one (of ``job_id``'s
    records only, when given: the record key is the job id) put in ``traces`` by offset, for :func:`with_traces`."""
    wanted = job_id.encode() if job_id is not None else None
    for msg in messages:
        offset: int = msg.offset()  # type: ignore[assignment]
        key = msg.key()
        if msg.headers() and (wanted is None or key == wanted):
            traceparent = header(msg, TRACEPARENT)
            if traceparent is not None:
                traces[offset] = traceparent
        yield offset, key, msg.value()  # type: ignore[misc]


def with_traces(logged: Iterable[LoggedEvent], traces: dict[int, str]) -> Iterator[LoggedEvent]:
    """Each event with its record's ``traceparent`` header taken from ``traces`` (filled by :func:`keyed`)."""
    for item in logged:
        traceparent = traces.pop(item.offset, None)
        yield item if traceparent is None else replace(item, traceparent=traceparent)


def with_fencing(events: Iterable[tuple[int, m.Event]], job_id: str | None,
                 mid_log: bool = False, claim: int = 0) -> Iterator[LoggedEvent]:
    """Apply the fold's fencing rule while scanning: epoch must equal the newest claim's.

    ``claim``: the newest valid claim before the scan's start, when a projection knows it.
    ``mid_log`` (no projection at hand): the scan starts after the last claim, so the first
    event's epoch stands in for it (a zombie cannot commit after the newer owner initialised
    its producer; a record forged at another epoch and read first would mislead it, which is
    why a reader with a view asks it instead: ``stores.fence_at``).
    """
    for offset, event in events:
        if isinstance(event.body, m.OwnershipClaimed):
            if fence.claim_counts(event.epoch, claim):
                claim = event.epoch
            continue
        if claim == 0 and mid_log:
            claim = event.epoch
        if job_id is None or event.job_id == job_id:
            yield LoggedEvent(offset, event, not fence.counts(event.epoch, claim))


def events_at(settings: Settings, partition: int, verdicts: list[tuple[int, str]]) -> list[LoggedEvent]:
    """The events at the given offsets (from the history index), with the index's fenced verdicts."""
    with topic_reader(settings, "history") as reader:
        return read_at(reader, settings.events_topic, partition, verdicts)


def read_at(reader: TopicReader, topic: str, partition: int, verdicts: list[tuple[int, str]]) -> list[LoggedEvent]:
    """The events at the sorted offsets of ``verdicts`` (offset, verdict), marked fenced as the verdicts say."""
    fenced = {offset for offset, verdict in verdicts if verdict == "fenced"}
    out = []
    for msg in reader.records_at(topic, partition, [offset for offset, _ in verdicts]):
        offset: int = msg.offset()  # type: ignore[assignment]
        event = decode_event_at(msg.value(), topic, partition, offset)  # type: ignore[arg-type]
        out.append(LoggedEvent(offset, event, offset in fenced, header(msg, TRACEPARENT) if msg.headers() else None))
    return out


def job_history(settings: Settings, job_id: str, tenant: str | None = None) -> list[LoggedEvent]:
    """A job's events, in log order, each marked fenced or not; none when ``tenant`` is given and not the job's.

    With a store of the job's partition in the state directory, the events it folded are
    read at the offsets of its history index, and only the log after its applied offset is
    scanned; without one, the partition is scanned from offset 0. A job with no event there
    is looked up in the history index of the state directory's other stores: a record
    produced to the wrong partition is rejected (``wrong_partition``) where it landed.

    ``tenant``: the caller's tenant. Another tenant's job reads as no events at all, exactly
    as an unknown id does, so a tenant cannot even learn that the id exists. Without it (an
    operator, an auditor) every job is read. A ``job_id`` that is no id at all (empty, not a
    string, too long) is a ``ValidationError`` naming ``job_id``.
    """
    events = _job_history(settings, check_job_id(job_id))
    return events if tenant is None or owner_tenant(events) in (None, tenant) else []


def owner_tenant(events: list[LoggedEvent]) -> str | None:
    """Whose the job is: the tenant of its first ``JobSubmitted`` or ``JobRejected`` (the audit's rule)."""
    for logged in events:
        if isinstance(logged.event.body, (m.JobSubmitted, m.JobRejected)):
            return logged.event.tenant_id or ""
    return None


def _job_history(settings: Settings, job_id: str) -> list[LoggedEvent]:
    from engine.questions.stores import indexed_history

    with topic_reader(settings, "history") as reader:
        p = job_partition(settings, reader, job_id)
        indexed = indexed_history(settings, p, job_id)
        if indexed is None:
            out = _scanned(reader, settings.events_topic, p, job_id)
        else:
            out = read_at(reader, settings.events_topic, p, indexed.entries)
            out += _scanned(reader, settings.events_topic, p, job_id, indexed.applied_offset + 1,
                            claim=indexed.epoch)
        return out or _landed_elsewhere(settings, reader, job_id, p)


def _landed_elsewhere(settings: Settings, reader: TopicReader, job_id: str, home: int) -> list[LoggedEvent]:
    """The job's events in partitions other than its own (a record produced to the wrong partition is rejected
    where it landed), as the other stores of the state directory indexed them; none without such stores."""
    from engine.questions.misrouted import landed_elsewhere

    out: list[LoggedEvent] = []
    for landed in landed_elsewhere(settings, job_id, home):
        out += read_at(reader, settings.events_topic, landed.partition, landed.entries)
    return out
