"""Read-only questions to the view of a state directory (usable while a view folds it).

Every question reads the view's stores (``<state_dir>/<ns>/view/pNNNN``, folded by ``epochq view
run`` from every partition of the events topic), never an owner's: an owner's store holds what its
decisions need, and only for the partitions it owns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from engine.config import Settings
from engine.domain.jobs import JobView
from projections.retention import PRUNED
from projections.store import TENANT_INDEXED, ProjectionStore, view_root, view_store_path
from projections.views import keys as k
from projections.views.ended import read_ended
from projections.views.jobs import decode_job, read_job

if TYPE_CHECKING:
    from projections.views.breakers import BreakerRecord

T = TypeVar("T")


def view_dir(settings: Settings) -> Path:
    """Where the view of the state directory keeps its stores (``<state_dir>/<ns>/view``; it may not exist)."""
    return view_root(settings.state_dir, settings.namespace)


def partition_dirs(settings: Settings) -> list[tuple[int, Path]]:
    """The partitions that have a view store in the state directory."""
    root = view_dir(settings)
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
    """The job record and its partition, if some store has it (an owner's write model: an ended job's tombstone,
    its final state and end, within the dedup window)."""
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            job = read_job(store, job_id) or read_ended(store, job_id)
            if job is not None:
                return p, job
    return None


def history_entries(settings: Settings, partition: int, job_id: str) -> list[tuple[int, str]]:
    """(offset, verdict) of every event of the job, from the history index: no log scan."""
    indexed = indexed_history(settings, partition, job_id)
    return indexed.entries if indexed is not None else []


@dataclass(frozen=True)
class IndexedHistory:
    """What one store knows of a job's events: where they are, and how far the store has read."""

    entries: list[tuple[int, str]]  # (offset, verdict) of each event of the job folded so far
    applied_offset: int  # events after this offset are not indexed yet: a reader scans from there
    epoch: int  # the newest valid claim folded: the fence for the events after ``applied_offset``


def indexed_history(settings: Settings, partition: int, job_id: str) -> IndexedHistory | None:
    """The job's history as ``partition``'s store indexed it; None when the state directory has no such store."""
    return _asked(settings, partition, lambda store: _indexed_history(store, job_id))


def _indexed_history(store: ProjectionStore, job_id: str) -> IndexedHistory | None:
    if store.get(TENANT_INDEXED) is None:
        return None  # an owner's write model (or a store older than the indexes) holds no history index: scan
    entries = _history(store, job_id)
    if store.get(PRUNED) is not None and store.get(k.job_key(job_id)) is None:
        return None  # the job may have left the view (retention), its older events with it: read the log
    return IndexedHistory(entries, store.applied_offset(), _epoch(store))


@dataclass(frozen=True)
class TenantIndex:
    """What one store knows of a tenant's jobs: which they are, where their events are, how far it has read."""

    jobs: frozenset[str]  # the jobs the tenant submitted (or sent a refused command about), folded so far
    entries: list[tuple[int, str]]  # (offset, verdict) of every event of those jobs, in log order
    applied_offset: int  # events after this offset are not indexed yet: a reader scans from there
    epoch: int  # the newest valid claim folded: the fence for the events after ``applied_offset``


def tenant_index(settings: Settings, partition: int, tenant: str) -> TenantIndex | None:
    """The tenant's jobs in ``partition`` as its store indexed them; None without a store that has the index."""
    return _asked(settings, partition, lambda store: _tenant_index(store, tenant))


def _tenant_index(store: ProjectionStore, tenant: str) -> TenantIndex | None:
    if store.get(TENANT_INDEXED) is None or store.get(PRUNED) is not None:
        return None  # made before the tenant index existed, or some jobs left it (retention): scan the log
    prefix = k.tenant_jobs_prefix(tenant)
    jobs = frozenset(k.suffix_after(prefix, key) for key, _ in store.scan(prefix))
    entries = sorted(entry for job in jobs for entry in _history(store, job))
    return TenantIndex(jobs, entries, store.applied_offset(), _epoch(store))


def _asked(settings: Settings, partition: int, question: Callable[[ProjectionStore], T | None]) -> T | None:
    """``question`` put to ``partition``'s store, read-only; None when the state directory has no readable one."""
    path = view_store_path(settings.state_dir, settings.namespace, partition)
    if not path.is_dir():
        return None
    try:
        with read_store(path) as store:
            return question(store)
    except Exception:  # noqa: BLE001 - no readable store there (being created, or not a store): scan instead
        return None


def _history(store: ProjectionStore, job_id: str) -> list[tuple[int, str]]:
    return [(k.offset_of(key), v.decode()) for key, v in store.scan(k.history_prefix(job_id))]


def fence_at(settings: Settings, partition: int, start: int) -> tuple[int, int] | None:
    """Where a scan of ``partition`` meant to start at ``start`` starts, and the newest valid claim before there:
    what makes its fencing the fold's own (``engine.domain.fence``), from the state directory's view store (its
    valid claims by offset, or its newest claim and applied offset when it has not folded that far: the scan then
    starts there, reading the view's lag more); None without a readable store (a reader then stands in).

    The process's long-lived store handles answer (``engine.questions.readers``): no store is opened per question."""
    from engine.questions.readers import READERS

    store = READERS.store(view_store_path(settings.state_dir, settings.namespace, partition))
    return None if store is None else claim_before(store, start)


def claim_before(store: ProjectionStore, start: int) -> tuple[int, int] | None:
    """(where to scan from, the newest valid claim before there), at or before ``start``: a store's answer. Pure
    over the store's reads; None for a store that folded nothing."""
    applied = store.applied_offset()
    if applied < 0:
        return None
    if applied + 1 < start:
        return applied + 1, _epoch(store)
    claims = [(int(value.rsplit(b"\x00", 1)[1]), k.offset_of(key)) for key, value in store.scan(k.CLAIMS)]
    return start, max((epoch for offset, epoch in claims if offset < start), default=0)


def _epoch(store: ProjectionStore) -> int:
    epoch = store.get(k.EPOCH)
    return int(epoch) if epoch is not None else 0


@dataclass(frozen=True)
class DeadFilter:
    """Which dead-lettered jobs an operator means."""

    task_type: str | None = None
    tenant: str | None = None
    since_us: int | None = None
    until_us: int | None = None

    def admits(self, job: JobView, at: int | None = None) -> bool:
        """Whether ``job`` passes the filter; ``at``: the time since/until compare with (default: its death)."""
        dead_at = (job.finished_at or 0) if at is None else at
        return ((self.task_type is None or job.task_type == self.task_type)
                and (self.tenant is None or job.tenant_id == self.tenant)
                and (self.since_us is None or dead_at >= self.since_us)
                and (self.until_us is None or dead_at < self.until_us))


def applied_offsets(settings: Settings) -> dict[int, int]:
    """The offset of the last event each store of the state directory folded (-1: none yet), per partition."""
    out: dict[int, int] = {}
    for p, path in partition_dirs(settings):
        try:
            with read_store(path) as store:
                out[p] = store.applied_offset()
        except Exception:  # noqa: BLE001 - a store being created, or not a store: not a source of answers
            continue
    return out


def quarantined(settings: Settings) -> list[tuple[int, int, str]]:
    """(partition, events offset, error) of every quarantined command the state directory's stores folded."""
    out: list[tuple[int, int, str]] = []
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            out += [(p, int(k.suffix_after(k.QUARANTINE, key)), raw.decode("utf-8", "replace"))
                    for key, raw in store.scan(k.QUARANTINE)]
    return out


def queued_jobs(settings: Settings, where: DeadFilter | None = None) -> list[JobView]:
    """Jobs waiting in a ready queue of every partition, oldest submission first, filtered (``since`` and
    ``until`` compare with the submission time)."""
    where = where or DeadFilter()
    out = _indexed_jobs(settings, k.READY, lambda job: where.admits(job, job.submitted_at))
    return sorted(out, key=lambda j: (j.submitted_at, j.job_id))


def dead_letters(settings: Settings, where: DeadFilter | None = None) -> list[JobView]:
    """Dead-lettered jobs of every partition, oldest first, filtered."""
    where = where or DeadFilter()
    out = _indexed_jobs(settings, k.DEAD, where.admits)
    return sorted(out, key=lambda j: (j.finished_at or 0, j.job_id))


def _indexed_jobs(settings: Settings, index: bytes, admits: Callable[[JobView], bool]) -> list[JobView]:
    """The jobs an index (its values are job ids) lists in every partition, as ``admits`` lets through."""
    out: list[JobView] = []
    for _, path in partition_dirs(settings):
        with read_store(path) as store:
            for _, job_id in store.scan(index):
                raw = store.get(k.job_key(job_id.decode()))
                if raw is not None and admits(job := decode_job(raw)):
                    out.append(job)
    return out


def kept_stores(settings: Settings) -> list[tuple[int, ProjectionStore]]:
    """Every readable view store of the state directory through the process's kept handles (secondaries caught
    up with their writer: a few ms each), not opened read-only for the question (which replays the store's
    write-ahead log: tens of ms or more per store while a view writes it)."""
    from engine.questions.readers import READERS

    return READERS.stores(settings)


def queue_report(settings: Settings) -> dict[str, dict[str, Any]]:
    """Per lane: queued jobs, and per tenant its queued jobs, starts served and share of starts."""
    from engine.domain.lanes import RUNNABLE_LANES

    lanes = [ln.value for ln in RUNNABLE_LANES]
    depths = dict.fromkeys(lanes, 0)
    tenants: dict[str, dict[str, dict[str, float]]] = {lane: {} for lane in lanes}
    for _, store in kept_stores(settings):
        for lane in lanes:
            depths[lane] += _lane_of(store, lane, tenants[lane])
    return {lane: {"queued": depths[lane], "tenants": _shared(tenants[lane])} for lane in lanes}


def _lane_of(store: ProjectionStore, lane: str, tenants: dict[str, dict[str, float]]) -> int:
    """Add one store's queued jobs and starts served per tenant of ``lane`` to ``tenants``; its lane depth."""
    from projections.views.counters import backlogged, read_int

    for tenant, queued in backlogged(store, lane).items():
        tenants.setdefault(tenant, {"queued": 0, "served": 0})["queued"] += queued
    served_prefix = k.lane_tenant_key(k.SERVED, lane, "")
    for key, value in store.scan(served_prefix):
        tenants.setdefault(k.suffix_after(served_prefix, key), {"queued": 0, "served": 0})["served"] += int(value)
    return read_int(store, k.lane_key(k.LANE_DEPTH, lane))


def _shared(tenants: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The tenants by name, each with its share of the starts served."""
    total = sum(t["served"] for t in tenants.values())
    for t in tenants.values():
        t["share"] = round(t["served"] / total, 4) if total else 0.0
    return dict(sorted(tenants.items()))


def breaker_report(settings: Settings) -> list[BreakerRecord]:
    """Each task type's newest breaker status across the partitions of the state directory."""
    from projections.views.breakers import all_breakers

    newest: dict[str, BreakerRecord] = {}
    for _, store in kept_stores(settings):
        for record in all_breakers(store):
            old = newest.get(record.task_type)
            if old is None or record.since > old.since:
                newest[record.task_type] = record
    return sorted(newest.values(), key=lambda r: r.task_type)


def tripped_breakers(settings: Settings) -> list[BreakerRecord]:
    """The task types whose newest breaker status is not closed (open, or half-open and probing)."""
    from engine.domain.breaker import BreakerStatus

    return [b for b in breaker_report(settings) if b.status is not BreakerStatus.CLOSED]
