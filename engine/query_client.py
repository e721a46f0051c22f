"""The client's read-only questions about many jobs and about the engines (mixed into ``engine.client.Client``).

Jobs are answered from the view in ``settings.state_dir`` (``engine.questions.jobs``),
engines from their heartbeats on ``<ns>.workers`` (``engine.questions.workers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from engine.questions.workers import WorkerRow, list_workers
from engine.questions.view_status import await_view
from engine.questions.jobs import JobFilter, JobPage, list_jobs

if TYPE_CHECKING:
    from engine.config import Settings


def time_us(value: datetime | float | None) -> int | None:
    """µs since the epoch of an aware datetime or of seconds since the epoch (None stays None)."""
    if value is None:
        return None
    seconds = value.timestamp() if isinstance(value, datetime) else float(value)
    return int(seconds * 1_000_000)


class QueryMethods:
    """``jobs`` and ``workers``: the catalog of jobs and the engines at work."""

    settings: Settings

    def jobs(self, status: str | None = None, tenant: str | None = None, task_type: str | None = None,
             since: datetime | float | None = None, until: datetime | float | None = None,
             labels: Mapping[str, str] | None = None, cursor: str | None = None, limit: int = 50) -> JobPage:
        """One page of jobs, newest submission first, with counts per status; ``cursor``: the previous
        page's ``next_cursor``. ``since``/``until`` compare with the submission time. Answered by the view of
        ``settings.state_dir`` (every partition), once it has folded what the log held when asked (or after a
        few seconds)."""
        await_view(self.settings)
        pairs = tuple(sorted((labels or {}).items()))
        flt = JobFilter(status, tenant, task_type, time_us(since), time_us(until), pairs)
        return list_jobs(self.settings, flt, cursor=cursor, limit=limit)

    def workers(self) -> list[WorkerRow]:
        """Every engine instance: owned partitions with epoch and phase, slots per lane, running jobs."""
        return list_workers(self.settings)
