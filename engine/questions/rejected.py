"""Rejected submits, listed: ``jobs list --status rejected`` over the views of the state directory, newest first.

A rejected submit made no job, so the catalog's indexes never hold it; each view keeps its rejections apart
(``projections.views.rejected``), within the view's retention. The page and its cursor read as the catalog's.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.config import Settings
from engine.questions.jobs import JobFilter, JobPage, JobRow, check_limit, decode_cursor, encode_cursor
from engine.questions.readers import READERS
from engine.errors import ValidationError
from projections.views.rejected import REJECTED, Rejection, rejections

STATUS = "rejected"


def list_rejected(settings: Settings, flt: JobFilter, *, cursor: str | None = None, limit: int = 50) -> JobPage:
    """One page of the rejected submits ``flt`` admits (its status aside), newest first, after ``cursor``."""
    if flt.labels:
        raise ValidationError("label: a rejected submit made no job, and keeps no labels", "labels")
    found: list[JobRow] = []
    partitions = []
    for p, store in READERS.stores(settings):
        partitions.append(p)
        found += [row(r, p) for r in rejections(store.scan(REJECTED)) if admits(flt, r)]
    rows, next_cursor = rejected_page(found, decode_cursor(cursor) if cursor else None, check_limit(limit))
    return JobPage(rows, {STATUS: len(found)}, next_cursor, partitions)


def admits(flt: JobFilter, rejection: Rejection) -> bool:
    """Whether the filter (tenant, task type, since, until) lets the rejection through. Pure."""
    at = rejection.rejected_at
    return ((flt.tenant is None or rejection.tenant == flt.tenant)
            and (flt.task_type is None or rejection.task_type == flt.task_type)
            and (flt.since_us is None or at >= flt.since_us) and (flt.until_us is None or at < flt.until_us))


def row(rejection: Rejection, partition: int) -> JobRow:
    """A rejection as a listing row: submitted and updated when it was rejected, its reason as its error."""
    error = f"{rejection.reason}: {rejection.detail}" if rejection.detail else rejection.reason
    return JobRow(rejection.job_id, rejection.tenant, rejection.task_type, STATUS, 0, "", 0,
                  rejection.rejected_at, None, rejection.rejected_at, partition, error)


def rejected_page(rows: Iterable[JobRow], after: tuple[int, str] | None,
                  limit: int) -> tuple[list[JobRow], str | None]:
    """The ``limit`` rows newest first after the position ``after`` (time, job id), and the next cursor. Pure."""
    ordered = sorted(rows, key=lambda r: (-r.submitted_at_us, r.job_id))
    if after is not None:
        ordered = [r for r in ordered if (-r.submitted_at_us, r.job_id) > (-after[0], after[1])]
    page = ordered[:limit]
    more = len(ordered) > limit
    return page, encode_cursor(page[-1].submitted_at_us, page[-1].job_id) if more else None
