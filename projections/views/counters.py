"""Counters the fold keeps beside the indexes: queue depths, served starts, fair-share clocks.

Unlike the indexes they are not a function of one job record, so the fold updates them
incrementally; being folded from the same events in the same order, they rebuild identically.
"""

from __future__ import annotations

from typing import Any

from engine.contract import messages as m
from engine.domain.fairness import FairState
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from projections.views import keys as k


def add(batch: Any, key: bytes, delta: int) -> None:
    """Add ``delta`` to the integer under ``key`` (absent means 0; 0 deletes the key)."""
    value = int(batch.get(key) or 0) + delta
    if value:
        batch.put(key, b"%d" % value)
    else:
        batch.delete(key)


def read_int(reader: Any, key: bytes) -> int:
    """The integer under ``key`` (0 if absent)."""
    return int(reader.get(key) or 0)


def track_depths(batch: Any, before: JobView | None, after: JobView | None) -> None:
    """Keep the per-tenant backlog and the per-lane and per-task-type depths in step with the ready queue."""
    was = before is not None and before.state is JobState.QUEUED
    now = after is not None and after.state is JobState.QUEUED
    if was and not now:
        _depth(batch, before, -1)  # type: ignore[arg-type]
    elif now and not was:
        _depth(batch, after, +1)  # type: ignore[arg-type]
    elif was and before.lane != after.lane:  # type: ignore[union-attr]  # reprioritized into another lane
        _depth(batch, before, -1)  # type: ignore[arg-type]
        _depth(batch, after, +1)  # type: ignore[arg-type]


def _depth(batch: Any, job: JobView, delta: int) -> None:
    add(batch, k.lane_tenant_key(k.BACKLOG, job.lane, job.tenant_id), delta)
    add(batch, k.lane_key(k.LANE_DEPTH, job.lane), delta)
    add(batch, k.type_depth_key(job.task_type), delta)


def charge_start(batch: Any, job: JobView, started: m.JobStarted) -> None:
    """A start: count it as served and advance the tenant's fair-share clock by its units."""
    add(batch, k.lane_tenant_key(k.SERVED, job.lane, job.tenant_id), 1)
    if started.fair_units > 0:  # engine.domain.fairness.advance, on the two numbers it touches
        vkey, fkey = k.lane_key(k.VTIME, job.lane), k.lane_tenant_key(k.FINISH, job.lane, job.tenant_id)
        start = max(read_int(batch, vkey), read_int(batch, fkey))
        batch.put(vkey, b"%d" % start)
        batch.put(fkey, b"%d" % (start + started.fair_units))


def fair_state(reader: Any, lane: str) -> FairState:
    """A lane's fair-share clock as stored (for an owner taking the partition)."""
    prefix = k.lane_tenant_key(k.FINISH, lane, "")
    tags = {k.suffix_after(prefix, key): int(v) for key, v in reader.scan(prefix)}
    return FairState(read_int(reader, k.lane_key(k.VTIME, lane)), tags)


def backlogged(reader: Any, lane: str) -> dict[str, int]:
    """Tenants with queued jobs in ``lane`` and how many each has."""
    prefix = k.lane_tenant_key(k.BACKLOG, lane, "")
    return {k.suffix_after(prefix, key): int(v) for key, v in reader.scan(prefix)}


def lane_depth(reader: Any, lane: str) -> int:
    """Queued jobs in ``lane`` (``reader``: a batch or a store)."""
    return read_int(reader, k.lane_key(k.LANE_DEPTH, lane))


def queued_per_type(reader: Any) -> dict[str, int]:
    """Per task type with queued jobs, how many. In a store folded before this counter existed, a job queued then
    counts -1 when it leaves the queue, so the count is low by those jobs until the store is rebuilt; below 0 it
    reads as nothing queued."""
    return {k.suffix_after(k.TYPE_DEPTH, key): count for key, value in reader.scan(k.TYPE_DEPTH)
            if (count := int(value)) > 0}


def tenant_backlog(reader: Any, tenant: str, lanes: tuple[str, ...]) -> int:
    """The tenant's queued jobs over ``lanes``."""
    return sum(read_int(reader, k.lane_tenant_key(k.BACKLOG, lane, tenant)) for lane in lanes)
