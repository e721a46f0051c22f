"""The job catalog: filtered, paged lists of jobs over the state directory's stores, with counts per status.

Pure reads of the projections (read-only RocksDB handles, no Kafka): the console, ``epochq jobs
list`` and ``Client.jobs`` all answer from here. Pages are newest submission first, merged
across the partitions the state directory holds; the cursor names the last row's position
(submission time, job id), so paging needs no state on the server.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from engine.config import Settings
from engine.domain.jobs import JobView
from engine.errors import ValidationError
from projections.views.listing import STATUSES, status_of

__all__ = ["STATUSES", "JobDetail", "JobFilter", "JobPage", "JobRow", "job_detail", "list_jobs", "status_of"]
MAX_LIMIT = 1000


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a listing shows; ``since_us``/``until_us`` compare with the submission time."""

    status: str | None = None
    tenant: str | None = None
    task_type: str | None = None
    since_us: int | None = None  # submitted at or after
    until_us: int | None = None  # submitted before
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise ValidationError(f"status: {self.status!r} is not one of {', '.join(STATUSES)}", "status")

    def without_status(self) -> JobFilter:
        """The same filter for every status (what the counts are for)."""
        return JobFilter(None, self.tenant, self.task_type, self.since_us, self.until_us, self.labels)


@dataclass(frozen=True)
class JobRow:
    """One job as a listing shows it."""

    job_id: str
    tenant: str
    task_type: str
    status: str
    priority: int
    lane: str
    attempts: int  # counted toward max_attempts: re-queued ones are not (JobView.counted_attempts)
    submitted_at_us: int
    due_at_us: int | None
    updated_at_us: int
    partition: int
    error: str | None


@dataclass(frozen=True)
class JobPage:
    """One page of a listing, the counts per status for its filter (without its status), the next cursor."""

    rows: list[JobRow]
    counts: dict[str, int]  # per status, for the filter without its status
    next_cursor: str | None  # opaque; pass back to get the next page
    partitions: list[int]  # the partitions this state directory answered for
    counts_exact: bool = field(default=True)  # False: some count stopped at COUNT_CAP (a time or label filter)
    unindexed: list[int] = field(default_factory=list)  # partitions whose store predates the catalog indexes (slow)


def row_of(job: JobView, partition: int) -> JobRow:
    """A job record as a listing row."""
    error = None
    if job.errors:
        last = job.errors[-1]
        error = f"{last.error_type}: {last.message}"
    elif job.dead_reason:
        error = job.dead_reason
    return JobRow(job.job_id, job.tenant_id, job.task_type, status_of(job.state), job.priority, job.lane,
                  job.counted_attempts(), job.submitted_at, job.due_at, job.updated_at, partition, error)


def encode_cursor(submitted_at: int, job_id: str) -> str:
    """The cursor after a row: its position in newest-first order."""
    return base64.urlsafe_b64encode(b"%d:%s" % (submitted_at, job_id.encode())).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    """(submission time, job id) of the row a cursor follows; ValidationError for one not made here."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, job_id = raw.split(":", 1)
        return int(at), job_id
    except (ValueError, UnicodeDecodeError):
        raise ValidationError(f"cursor: {cursor!r} is not a cursor from a previous page", "cursor") from None


def check_limit(limit: int) -> int:
    """A page size between 1 and MAX_LIMIT."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"limit: {limit} is not between 1 and {MAX_LIMIT}", "limit")
    return limit


def list_jobs(settings: Settings, flt: JobFilter, *, cursor: str | None = None, limit: int = 50) -> JobPage:
    """One page of the jobs ``flt`` admits, newest submission first, after ``cursor``; counts per status."""
    from engine.questions.listing import page

    return page(settings, flt, decode_cursor(cursor) if cursor else None, check_limit(limit))


@dataclass(frozen=True)
class JobDetail:
    """What a job page shows from the projections: the record, and where each of its events is in the log."""

    row: JobRow
    job: JobView  # the whole record: payload, result, every attempt's error, due time
    history: list[tuple[int, str]]  # (offset in the partition's events, the fold's verdict), oldest first
    applied_offset: int  # the store has folded the log up to here: later events are not in ``history`` yet


def job_detail(settings: Settings, job_id: str, partition: int | None = None) -> JobDetail | None:
    """The job's record and history offsets from the store that holds it (``partition`` if known; else each
    store is asked, a point read each); None if no store here has it."""
    from engine.questions.readers import READERS
    from projections.views.jobs import decode_job
    from projections.views.keys import history_prefix, job_key, offset_of

    for p, store in READERS.stores(settings):
        if partition is not None and p != partition:
            continue
        raw = store.get(job_key(job_id))  # not read_job: its cache of decoded records would go stale here
        if raw is not None:
            job = decode_job(raw)
            history = [(offset_of(key), v.decode()) for key, v in store.scan(history_prefix(job_id))]
            return JobDetail(row_of(job, p), job, history, store.applied_offset())
    return None
