"""How a catalog page is read from the stores (first cut: every job record; the indexes come next)."""

from __future__ import annotations

from engine.config import Settings
from engine.domain.jobs import JobView
from projections.catalog import STATUSES, JobFilter, JobPage, JobRow, encode_cursor, row_of, status_of
from projections.query import partition_dirs, read_store
from projections.views import keys as k
from projections.views.jobs import decode_job


def page(settings: Settings, flt: JobFilter, after: tuple[int, str] | None, limit: int) -> JobPage:
    """One page of ``flt``'s jobs, newest first, after the position ``after``."""
    rows: list[JobRow] = []
    counts = dict.fromkeys(STATUSES, 0)
    parts: list[int] = []
    for p, path in partition_dirs(settings):
        try:
            with read_store(path) as store:
                jobs = [decode_job(raw) for _, raw in store.scan(k.JOB)]
        except Exception:  # noqa: BLE001 - a store being created: not a source of answers
            continue
        parts.append(p)
        for job in jobs:
            if _admits(flt.without_status(), job):
                counts[status_of(job.state)] += 1
                if (flt.status is None or status_of(job.state) == flt.status) and _after(job, after):
                    rows.append(row_of(job, p))
    rows.sort(key=lambda r: (-r.submitted_at_us, r.job_id))
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = encode_cursor(rows[-1].submitted_at_us, rows[-1].job_id) if more else None
    return JobPage(rows, counts, cursor, parts)


def _after(job: JobView, after: tuple[int, str] | None) -> bool:
    return after is None or (-job.submitted_at, job.job_id) > (-after[0], after[1])


def _admits(flt: JobFilter, job: JobView) -> bool:
    return ((flt.tenant is None or job.tenant_id == flt.tenant)
            and (flt.task_type is None or job.task_type == flt.task_type)
            and (flt.since_us is None or job.submitted_at >= flt.since_us)
            and (flt.until_us is None or job.submitted_at < flt.until_us)
            and not flt.labels)
