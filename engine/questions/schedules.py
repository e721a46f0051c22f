"""Read-only questions about schedules and timers to the projections of a state directory."""

from __future__ import annotations

from engine.config import Settings
from engine.domain.cron import next_occurrences
from engine.domain.schedules import LABEL_SCHEDULE, ScheduleView
from engine.questions.jobs import JobFilter
from engine.questions.stores import kept_stores, partition_dirs, read_store
from projections.views import keys as k
from projections.views.jobs import read_job
from projections.views.schedules import SCHEDULE_DUE, all_schedules, read_schedule


def schedules(settings: Settings, tenant: str | None = None) -> list[ScheduleView]:
    """Every schedule of every partition in the state directory (of one tenant if given), by id."""
    out: list[ScheduleView] = []
    for _, store in kept_stores(settings):
        out.extend(v for v in all_schedules(store) if tenant is None or v.tenant_id == tenant)
    return sorted(out, key=lambda v: v.schedule_id)


def next_runs(view: ScheduleView, after_us: int, count: int) -> list[int]:
    """The schedule's next ``count`` occurrences after ``after_us`` (UTC µs), paused or not. Pure."""
    return next_occurrences(view.definition(), after_us, count)


def runs_filter(view: ScheduleView) -> JobFilter:
    """The catalog filter of the schedule's occurrence jobs: its tenant, and its label on each of them."""
    return JobFilter(tenant=view.tenant_id, labels=((LABEL_SCHEDULE, view.schedule_id),))


def find_schedule(settings: Settings, schedule_id: str) -> tuple[int, ScheduleView] | None:
    """The schedule's record and its partition, if some store has it."""
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            view = read_schedule(store, schedule_id)
            if view is not None:
                return p, view
    return None


def due_entry(settings: Settings, job_id: str) -> bytes | None:
    """The job's key in the on-disk due-time index (``d:<due>:<job>``), if it is waiting there."""
    for _, path in partition_dirs(settings):
        with read_store(path) as store:
            job = read_job(store, job_id)
            if job is not None and job.due_at is not None:
                key = k.due_key(job.due_at, job_id)
                return key if store.get(key) is not None else None
    return None


def due_index_sizes(settings: Settings) -> dict[int, tuple[int, int]]:
    """Per partition: entries of the job due index (``d:``) and of the schedule timers (``D:``)."""
    sizes = {}
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            sizes[p] = (sum(1 for _ in store.scan(k.DUE)), sum(1 for _ in store.scan(SCHEDULE_DUE)))
    return sizes
