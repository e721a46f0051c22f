"""Read-only questions to the projections of a state directory (usable while an engine runs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.config import Settings
from engine.domain.jobs import JobView
from projections.store import ProjectionStore
from projections.views import keys as k
from projections.views.jobs import decode_job, read_job


def partition_dirs(settings: Settings) -> list[tuple[int, Path]]:
    """The partitions that have a store in the state directory."""
    root = Path(settings.state_dir) / settings.namespace
    if not root.is_dir():
        return []
    return sorted((int(d.name[1:]), d) for d in root.iterdir() if d.is_dir() and d.name[1:].isdigit())


@contextmanager
def read_store(path: Path) -> Iterator[ProjectionStore]:
    """A read-only view of one store, closed afterwards."""
    store = ProjectionStore(path, read_only=True)
    try:
        yield store
    finally:
        store.close()


def find_job(settings: Settings, job_id: str) -> tuple[int, JobView] | None:
    """The job record and its partition, if some store has it."""
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            job = read_job(store, job_id)
            if job is not None:
                return p, job
    return None


def history_entries(settings: Settings, partition: int, job_id: str) -> list[tuple[int, str]]:
    """(offset, verdict) of every event of the job, from the history index: no log scan."""
    for p, path in partition_dirs(settings):
        if p == partition:
            with read_store(path) as store:
                return [(k.offset_of(key), v.decode()) for key, v in store.scan(k.history_prefix(job_id))]
    return []


@dataclass(frozen=True)
class DeadFilter:
    """Which dead-lettered jobs an operator means."""

    task_type: str | None = None
    tenant: str | None = None
    since_us: int | None = None
    until_us: int | None = None

    def admits(self, job: JobView) -> bool:
        """Whether ``job`` passes the filter."""
        dead_at = job.finished_at or 0
        return ((self.task_type is None or job.task_type == self.task_type)
                and (self.tenant is None or job.tenant_id == self.tenant)
                and (self.since_us is None or dead_at >= self.since_us)
                and (self.until_us is None or dead_at < self.until_us))


def dead_letters(settings: Settings, where: DeadFilter | None = None) -> list[JobView]:
    """Dead-lettered jobs of every partition, oldest first, filtered."""
    where = where or DeadFilter()
    out: list[JobView] = []
    for _, path in partition_dirs(settings):
        with read_store(path) as store:
            for _, job_id in store.scan(k.DEAD):
                raw = store.get(k.job_key(job_id.decode()))
                if raw is not None and where.admits(job := decode_job(raw)):
                    out.append(job)
    return sorted(out, key=lambda j: (j.finished_at or 0, j.job_id))
