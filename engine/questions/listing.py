"""How a catalog page is read: newest-first ranges of the catalog indexes, merged across statuses and partitions.

A filter picks one index (``projections.views.listing``): by tenant and task type, by tenant, by
task type, or by status alone; one range per status asked for, per partition, each already in
page order, so a page reads ``limit`` entries (plus one, to know there is more) and one record
per row. Counts per status come from the fold's counters; with a time filter, by counting the
ranges' keys, up to COUNT_CAP per status and partition; with a label filter, from the newest
TALLY_CAP matching entries per partition (then ``counts_exact`` is false). Labels are checked
entry by entry (point reads of the label index), or, with no other filter, read from the label
index itself; such a page steps over at most SCAN_BUDGET entries and, past that, ends early
with a cursor to go on from.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from engine.config import Settings
from engine.domain.jobs import JobView
from engine.questions.jobs import JobFilter, JobPage, JobRow, encode_cursor, row_of
from engine.questions.readers import READERS
from projections.store import LISTING_INDEXED, ProjectionStore
from projections.views import keys as k
from projections.views.jobs import decode_job
from projections.views.listing import INVERTED, RUNNING, SEP, STATUS_OF, STATUSES, inverted, label_key

SCAN_BUDGET = 20_000
"""Index entries a page may step over for filters no index holds (labels beside other filters)."""
COUNT_CAP = 10_000
"""Entries counted per status when a time or label filter rules the counters out; past it, counts are a floor."""
TALLY_CAP = 250
"""Entries per partition whose records a label filter's counts read (their statuses are in the records only)."""
_INV = 16  # digits of the inverted submission time in a key


@dataclass
class Part:
    """One partition's store, open for this request."""

    partition: int
    store: ProjectionStore
    indexed: bool  # the store has held the catalog indexes since its first commit


def page(settings: Settings, flt: JobFilter, after: tuple[int, str] | None, limit: int) -> JobPage:
    """One page of ``flt``'s jobs, newest first, after the position ``after``."""
    parts = open_parts(settings)
    rows, cursor, budget_left = _rows(parts, flt, after, limit)
    counts, exact = _counts(parts, flt)
    return JobPage(rows, counts, cursor, [p.partition for p in parts], exact and budget_left,
                   [p.partition for p in parts if not p.indexed])


def open_parts(settings: Settings) -> list[Part]:
    """Every readable store of the state directory, from the process's readers (kept open, caught up)."""
    return [Part(p, store, store.get(LISTING_INDEXED) is not None) for p, store in READERS.stores(settings)]


# --- rows ------------------------------------------------------------------------------------

def _rows(parts: list[Part], flt: JobFilter, after: tuple[int, str] | None,
          limit: int) -> tuple[list[JobRow], str | None, bool]:
    """Up to ``limit`` rows, the next cursor, and whether the scan budget held out."""
    rows: list[JobRow] = []
    stepped = 0
    last: tuple[int, str] | None = None
    for position, part, job in _candidates(parts, flt, after):
        stepped += 1
        if job is not None:
            if len(rows) == limit:
                return rows, encode_cursor(*last) if last else None, True
            rows.append(row_of(job, part.partition))
        last = position
        if stepped >= SCAN_BUDGET and len(rows) < limit:
            return rows, encode_cursor(*last), False
    return rows, None, True


Candidate = tuple[tuple[int, str], Part, "JobView | None"]


def _candidates(parts: list[Part], flt: JobFilter, after: tuple[int, str] | None) -> Iterator[Candidate]:
    """Every entry of the chosen ranges in page order: its position, store, and the job if ``flt`` admits it."""
    streams = [_stream(part, rng, flt, after) for part in parts for rng in _ranges(part, flt)]
    for suffix, _, part, job in heapq.merge(*streams):
        yield _position(suffix), part, job


Range = tuple[bytes, tuple[tuple[str, str], ...], bool]
"""A key range to read: its prefix, the labels its entries must be checked for, and whether each
record must be checked for the filter's tenant and task type too (running jobs: the status index)."""


def _ranges(part: Part, flt: JobFilter) -> list[Range]:
    """The ranges to read in ``part`` for ``flt``."""
    if not part.indexed:
        return [(k.JOB, flt.labels, True)]
    if flt.labels and flt.status is None and flt.tenant is None and flt.task_type is None:
        name, value = flt.labels[0]
        return [(k.LIST_LABEL + name.encode() + SEP + value.encode() + SEP, flt.labels[1:], False)]
    narrowed = flt.tenant is not None or flt.task_type is not None
    return [(index_prefix(flt, status), flt.labels, False) if status != "running" or not narrowed
            else (k.LIST_STATUS + RUNNING + SEP, flt.labels, True) for status in _statuses(flt)]


def index_prefix(flt: JobFilter, status: str) -> bytes:
    """The prefix of the catalog range holding ``flt``'s jobs in ``status``."""
    return _scoped(flt, (k.LIST_TENANT_TYPE, k.LIST_TENANT, k.LIST_TYPE, k.LIST_STATUS), status.encode() + SEP)


def _scoped(flt: JobFilter, prefixes: tuple[bytes, bytes, bytes, bytes], tail: bytes) -> bytes:
    """The key under the first of (tenant and type, tenant, type, neither) prefixes that ``flt`` narrows to."""
    by_both, by_tenant, by_type, by_status = prefixes
    if flt.tenant is not None and flt.task_type is not None:
        return by_both + flt.tenant.encode() + SEP + flt.task_type.encode() + SEP + tail
    if flt.tenant is not None:
        return by_tenant + flt.tenant.encode() + SEP + tail
    if flt.task_type is not None:
        return by_type + flt.task_type.encode() + SEP + tail
    return by_status + tail


def _statuses(flt: JobFilter) -> tuple[str, ...]:
    return (flt.status,) if flt.status is not None else STATUSES


def _stream(part: Part, rng: Range, flt: JobFilter,
            after: tuple[int, str] | None) -> Iterator[tuple[bytes, int, Part, JobView | None]]:
    """One range's entries from the page's start: (sort suffix, partition, part, admitted job or None).

    The range holds the time and (unless it is coarse) the status, tenant and task type; labels
    are checked by point reads of the label index before the job's record is read."""
    prefix, labels, coarse = rng
    if prefix == k.JOB:
        yield from _unindexed(part, flt, after)
        return
    stop = inverted(flt.since_us) if flt.since_us is not None else b"9" * _INV
    store = part.store
    for key in store.keys(prefix, _start(prefix, flt, after)):
        suffix = key[len(prefix):]
        if suffix[:_INV] > stop:
            return
        job_id = suffix[_INV + 1:].decode()
        if labels and not _labelled(store, labels, INVERTED - int(suffix[:_INV]), job_id):
            yield suffix, part.partition, part, None
            continue
        job = _job(store, job_id)
        if coarse and job is not None and not _owned(flt, job):
            job = None
        yield suffix, part.partition, part, job


def _owned(flt: JobFilter, job: JobView) -> bool:
    """Whether ``job`` has the filter's tenant and task type (those it names)."""
    return ((flt.tenant is None or job.tenant_id == flt.tenant)
            and (flt.task_type is None or job.task_type == flt.task_type))


def _labelled(store: ProjectionStore, labels: tuple[tuple[str, str], ...], submitted_at: int, job_id: str) -> bool:
    return all(store.get(label_key(n, v, submitted_at, job_id)) is not None for n, v in labels)


def _start(prefix: bytes, flt: JobFilter, after: tuple[int, str] | None) -> bytes:
    """The first key of a range to read: after the cursor, and not newer than ``until``."""
    start = prefix
    if flt.until_us is not None:
        start = prefix + inverted(flt.until_us - 1)
    if after is not None:
        start = max(start, prefix + inverted(after[0]) + SEP + after[1].encode() + b"\x00")
    return start


def _job(store: ProjectionStore, job_id: str) -> JobView | None:
    raw = store.get(k.job_key(job_id))
    return decode_job(raw) if raw is not None else None


def admits(store: ProjectionStore, flt: JobFilter, job: JobView) -> bool:
    """Whether ``job`` passes every part of ``flt`` (labels by point reads of the label index)."""
    return ((flt.status is None or STATUS_OF[job.state] == flt.status)
            and (flt.tenant is None or job.tenant_id == flt.tenant)
            and (flt.task_type is None or job.task_type == flt.task_type)
            and (flt.since_us is None or job.submitted_at >= flt.since_us)
            and (flt.until_us is None or job.submitted_at < flt.until_us)
            and _labelled(store, flt.labels, job.submitted_at, job.job_id))


def _position(suffix: bytes) -> tuple[int, str]:
    """(submission time, job id) of a range entry's sort suffix."""
    return INVERTED - int(suffix[:_INV]), suffix[_INV + 1:].decode()


def _unindexed(part: Part, flt: JobFilter,
               after: tuple[int, str] | None) -> Iterator[tuple[bytes, int, Part, JobView | None]]:
    """A store made before the catalog indexes: every record read and sorted (slow; a rebuild adds them)."""
    jobs = [decode_job(raw) for _, raw in part.store.scan(k.JOB)]
    admitted = [j for j in jobs if admits(part.store, flt, j)]
    entries = sorted((inverted(j.submitted_at) + SEP + j.job_id.encode(), j) for j in admitted)
    start = inverted(after[0]) + SEP + after[1].encode() if after is not None else b""
    for suffix, job in entries:
        if suffix > start:
            yield suffix, part.partition, part, job


# --- counts ----------------------------------------------------------------------------------

def _counts(parts: list[Part], flt: JobFilter) -> tuple[dict[str, int], bool]:
    """Jobs per status for ``flt`` without its status, and whether every figure is exact."""
    base = JobFilter(None, flt.tenant, flt.task_type, flt.since_us, flt.until_us, flt.labels)
    counts = dict.fromkeys(STATUSES, 0)
    exact = True
    for part in parts:
        if not part.indexed or flt.labels:
            exact = _tally(part, base, counts) and exact
        elif flt.since_us is None and flt.until_us is None:
            for status in STATUSES:
                counts[status] += int(part.store.get(counter_key(base, status)) or 0)
        else:
            for status in STATUSES:
                n = _entries(part, JobFilter(status, *_rest(base)))
                counts[status] += n
                exact = exact and n < COUNT_CAP
    return counts, exact


def _rest(flt: JobFilter) -> tuple[str | None, str | None, int | None, int | None, tuple[tuple[str, str], ...]]:
    return flt.tenant, flt.task_type, flt.since_us, flt.until_us, flt.labels


def counter_key(flt: JobFilter, status: str) -> bytes:
    """The fold's counter of ``flt``'s jobs (tenant, task type, neither or both) in ``status``."""
    return _scoped(flt, (k.COUNT_TENANT_TYPE, k.COUNT_TENANT, k.COUNT_TYPE, k.COUNT_STATUS), status.encode())


def _entries(part: Part, flt: JobFilter) -> int:
    """Keys of ``flt``'s one-status range between its time bounds, up to COUNT_CAP (no record is read,
    but for running jobs of a tenant or task type: those are checked one by one)."""
    (prefix, _, coarse), = _ranges(part, flt)
    if coarse:
        return sum(1 for _, _, _, job in _stream(part, (prefix, (), True), flt, None) if job is not None)
    stop = inverted(flt.since_us) if flt.since_us is not None else b"9" * _INV
    n = 0
    for key in part.store.keys(prefix, _start(prefix, flt, None)):
        if key[len(prefix):len(prefix) + _INV] > stop or n >= COUNT_CAP:
            break
        n += 1
    return n


def _tally(part: Part, flt: JobFilter, counts: dict[str, int]) -> bool:
    """Add the jobs ``flt`` admits in ``part`` to ``counts`` per status, newest first, stepping over at
    most TALLY_CAP entries; whether all were seen."""
    stepped = 0
    for rng in _ranges(part, flt):
        for _, _, _, job in _stream(part, rng, flt, None):
            if job is not None:
                counts[STATUS_OF[job.state]] += 1
            stepped += 1
            if stepped >= TALLY_CAP:
                return False
    return True
