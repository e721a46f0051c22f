"""The dead-letter queue one page at a time: newest death first, a cursor each way, counts and error groups.

``dead_letters`` (engine.questions.stores) reads every dead job; a page here reads ``limit`` rows from
the dead-letter index (``x:<dead_at>:<job_id>``, walked backwards and merged across the
partitions), plus one pass that counts the filter's jobs and groups them by error, stopping at
TALLY_CAP entries (then the figures are a floor). Rows and counts answer the same filter:
task type, tenant, death time and error group. The console's dead-letter page reads it, and a
CLI may too.
"""

from __future__ import annotations

import base64
import heapq
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from engine.config import Settings
from engine.domain.jobs import JobView
from engine.errors import ValidationError
from engine.questions.jobs import check_limit
from engine.questions.stores import DeadFilter
from engine.questions.readers import READERS
from projections.store import ProjectionStore
from projections.views import keys as k
from projections.views.jobs import decode_job

TALLY_CAP = 20_000
"""Dead jobs a page's counts and groups read at most (newest first); past it they are a floor."""
SCAN_BUDGET = 20_000
"""Index entries a page of rows steps over at most for a filter no key holds (tenant, task type, error)."""
GROUP_WIDTH = 160
"""Characters of an error message that name its group."""

Position = tuple[int, str]  # (dead_at, job_id)


def error_group(job: JobView) -> str:
    """What a dead job's error group is called: its last error's type and first line, else its dead reason."""
    if job.errors:
        last = job.errors[-1]
        first_line = (last.message.strip().splitlines() or [""])[0]
        return f"{last.error_type}: {first_line}"[:GROUP_WIDTH]
    return (job.dead_reason.strip().splitlines() or ["(no error recorded)"])[0][:GROUP_WIDTH]


@dataclass(frozen=True)
class DeadQuery:
    """Which dead jobs a page or a bulk action means: a dead-letter filter and, optionally, one error group."""

    where: DeadFilter = DeadFilter()
    error: str | None = None

    def admits(self, job: JobView) -> bool:
        """Whether ``job`` passes every part of the query."""
        return self.where.admits(job) and (self.error is None or error_group(job) == self.error)


@dataclass(frozen=True)
class DeadPage:
    """One page of dead jobs (newest death first) with what the filter holds in all."""

    rows: list[JobView]
    first: int  # the position of rows[0] among the filter's jobs, from 0 (the newest)
    total: int  # the filter's dead jobs (a floor when not ``exact``)
    exact: bool
    groups: list[tuple[str, int]]  # (error group, dead jobs), most first; among the jobs counted
    next_cursor: str | None  # older rows
    prev_cursor: str | None  # newer rows (None on the first page)


def dead_page(settings: Settings, query: DeadQuery, *, after: str | None = None, before: str | None = None,
              limit: int = 50) -> DeadPage:
    """The ``limit`` dead jobs after ``after`` (older) or before ``before`` (newer); newest first without either."""
    check_limit(limit)
    stores = [store for _, store in READERS.stores(settings)]
    total, exact, groups = tally(stores, query)
    if before is not None:
        at, index = decode(before)
        newer = list(_walk(stores, query, at, newer=True, limit=limit + 1))
        rows, more = newer[:limit][::-1], True
        first = max(index - len(rows), 0) if len(newer) > limit else 0
    else:
        older_than, index = decode(after) if after is not None else (None, -1)
        rows = list(_walk(stores, query, older_than, newer=False, limit=limit + 1))
        first, more = index + 1, len(rows) > limit
        rows = rows[:limit]
    last = first + len(rows) - 1
    next_cursor = encode(_position(rows[-1]), last) if rows and more else None
    prev_cursor = encode(_position(rows[0]), first) if rows and first > 0 else None
    return DeadPage(rows, first, total, exact, groups, next_cursor, prev_cursor)


def tally(stores: list[ProjectionStore], query: DeadQuery) -> tuple[int, bool, list[tuple[str, int]]]:
    """How many dead jobs the query admits, whether that is exact (TALLY_CAP entries at most are read), and
    the error groups of the filter without its error group (most first)."""
    counted: Counter[str] = Counter()
    streams = [_entries(n, store, query.where, None, False) for n, store in enumerate(stores)]
    total = 0
    for stepped, (_, n, job_id) in enumerate(heapq.merge(*streams, reverse=True)):
        if stepped >= TALLY_CAP:
            return total, False, _most_first(counted)
        job = _record(stores[n], job_id)
        if job is not None and query.where.admits(job):
            group = error_group(job)
            counted[group] += 1
            total += query.error is None or group == query.error
    return total, True, _most_first(counted)


def _most_first(counted: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counted.items(), key=lambda g: (-g[1], g[0]))


def _record(store: ProjectionStore, job_id: str) -> JobView | None:
    raw = store.get(k.job_key(job_id))
    return decode_job(raw) if raw is not None else None


def _walk(stores: list[ProjectionStore], query: DeadQuery, at: Position | None, *, newer: bool, limit: int,
          budget: int = SCAN_BUDGET) -> Iterator[JobView]:
    """Up to ``limit`` admitted jobs past ``at`` (older, or ``newer``), in that order, stepping over at most
    ``budget`` index entries."""
    streams = [_entries(n, store, query.where, at, newer) for n, store in enumerate(stores)]
    found = 0
    for stepped, (_, n, job_id) in enumerate(heapq.merge(*streams, reverse=not newer)):
        if found >= limit or stepped >= budget:
            return
        job = _record(stores[n], job_id)
        if job is not None and query.admits(job):
            found += 1
            yield job


def _entries(n: int, store: ProjectionStore, where: DeadFilter, at: Position | None,
             newer: bool) -> Iterator[tuple[Position, int, str]]:
    """Store ``n``'s dead-letter entries past ``at`` in the walk's order, within the filter's death times."""
    for key in _forward(store, where, at) if newer else _backward(store, where, at):
        dead_at, job_id = _parsed(key)
        if newer and where.until_us is not None and dead_at >= where.until_us:
            return
        if not newer and where.since_us is not None and dead_at < where.since_us:
            return
        if (dead_at, job_id) != at:
            yield (dead_at, job_id), n, job_id


def _backward(store: ProjectionStore, where: DeadFilter, at: Position | None) -> Iterator[bytes]:
    start = k.dead_key(*at) if at is not None else None
    if where.until_us is not None:
        bound = k.DEAD + k.num(max(where.until_us - 1, 0)) + b":\xff"
        start = min(start, bound) if start is not None else bound
    return store.keys_backwards(k.DEAD, start)


def _forward(store: ProjectionStore, where: DeadFilter, at: Position | None) -> Iterator[bytes]:
    start = k.dead_key(*at) if at is not None else None
    if where.since_us is not None:
        bound = k.DEAD + k.num(where.since_us)
        start = max(start, bound) if start is not None else bound
    return store.keys(k.DEAD, start)


def _parsed(key: bytes) -> Position:
    dead_at, _, job_id = key[len(k.DEAD):].partition(b":")
    return int(dead_at), job_id.decode()


def _position(job: JobView) -> Position:
    return job.finished_at or 0, job.job_id


def encode(position: Position, index: int) -> str:
    """A cursor: a row's place in the dead-letter index and its position among the filter's rows."""
    at, job_id = position
    return base64.urlsafe_b64encode(b"%d:%d:%s" % (index, at, job_id.encode())).decode().rstrip("=")


def decode(cursor: str) -> tuple[Position, int]:
    """(position, index) of a cursor; ValidationError for one not made here."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        index, at, job_id = raw.split(":", 2)
        return (int(at), job_id), int(index)
    except (ValueError, UnicodeDecodeError):
        raise ValidationError(f"cursor: {cursor!r} is not a cursor from a previous page", "cursor") from None


def dead_jobs(settings: Settings, query: DeadQuery) -> list[JobView]:
    """Every dead job the query admits, oldest death first (what a bulk replay or purge acts on)."""
    from engine.questions.stores import dead_letters

    return [job for job in dead_letters(settings, query.where) if query.admits(job)]
