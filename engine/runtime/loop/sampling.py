"""What the engine's gauges show, worked out from the partitions it holds and the copies it follows."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from engine.contract import messages as m
from engine.domain.lanes import RUNNABLE_LANES
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.standby import Standbys
from engine.runtime.observe.metrics import EngineMetrics
from projections.store import ProjectionStore, rocksdb_memory
from projections.views.counters import lane_depth, queued_per_type
from projections.views.indexes import dead_count

log = logging.getLogger("epochq.engine")


def sample(metrics: EngineMetrics, partitions: Iterable[Partition], standbys: Standbys | None) -> None:
    """Lane and dead-letter depths, partitions restoring and followed, RocksDB's memory."""
    partitions = list(partitions)
    held = [p for p in partitions if p.deciding and p.store is not None]
    depths = {lane.value: sum(lane_depth(p.store, lane.value) for p in held) for lane in RUNNABLE_LANES}
    metrics.set_depths(depths, sum(dead_count(p.store) for p in held if p.store is not None))
    restoring = sum(1 for p in partitions if p.state in (State.ASSIGNED, State.RESTORING))
    metrics.set_copies(restoring, len(standbys.copies) if standbys is not None else 0)
    stores = [p.store for p in partitions if p.store is not None]
    stores += [c.store for c in standbys.copies.values()] if standbys is not None else []
    metrics.set_rocksdb_memory(rocksdb_memory(stores))


def pools_queued(partitions: Iterable[Partition], pool_of: Callable[[str], str | None],
                 pools: Iterable[str]) -> dict[str, int]:
    """Per remote pool, the jobs queued in the partitions this instance decides whose task type goes to it:
    the fold's per-task-type depth counters (one key per task type with queued jobs; no queue is scanned)."""
    held = [p.store for p in partitions if p.deciding and p.store is not None]
    return by_pool(queued_by_type(held), pool_of, pools)


def queued_by_type(stores: Iterable[ProjectionStore]) -> dict[str, int]:
    """Per task type, its queued jobs summed over ``stores`` (the fold's per-task-type depth counters)."""
    out: dict[str, int] = {}
    for store in stores:
        for task_type, count in queued_per_type(store).items():
            out[task_type] = out.get(task_type, 0) + count
    return out


def by_pool(queued: Mapping[str, int], pool_of: Callable[[str], str | None], pools: Iterable[str]) -> dict[str, int]:
    """``queued`` (per task type) summed per pool: every pool of ``pools`` (0 if none of its types waits);
    task types this instance runs itself are left out. Pure."""
    out = dict.fromkeys(pools, 0)
    for task_type, count in queued.items():
        pool = pool_of(task_type)
        if pool is not None and pool in out:
            out[pool] += count
    return out


def unknown_write(metrics: EngineMetrics, partition: int, event: m.Event) -> None:
    """A record of ``partition`` that does not count: alert (only a forged or a zombie's write is one)."""
    kind = "claim" if isinstance(event.body, m.OwnershipClaimed) else "event"
    metrics.unknown_writes.labels(kind).inc()
    log.error("partition %d: %s %s at epoch %d by %r does not count (not the valid claim's %s): a forged "
              "or a zombie's write, marked fenced", partition, kind, event.type, event.epoch, event.owner,
              "successor" if kind == "claim" else "epoch")
