"""The overview's figures: the last 15 minutes per task type, lanes, dead letters, lateness, breakers, partitions."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from engine.console.got import Got, get
from engine.console.reads import RECENT_WINDOW_S, Reads
from engine.domain.breaker import BreakerStatus
from engine.runtime.read.recent import quantile
from projections.catalog import JobFilter, list_jobs
from projections.query import breaker_report, queue_report


@dataclass(frozen=True)
class LatenessFigures:
    """p50 and p99 (ms) of the starts of one task type (or of all), and how many starts they are over."""

    task_type: str
    starts: int
    p50_ms: float
    p99_ms: float


def overview(reads: Reads) -> dict[str, Any]:
    """Everything the overview shows, each part read on its own (kept a few seconds for every tab)."""
    return reads.cache.get("overview", lambda: _overview(reads))  # type: ignore[no-any-return]


def _overview(reads: Reads) -> dict[str, Any]:
    settings = reads.settings
    recent = reads.from_log(lambda: _recent(reads))
    return {
        "recent": recent,
        "lanes": get(lambda: {lane: r["queued"] for lane, r in queue_report(settings).items()}),
        "counts": get(lambda: list_jobs(settings, JobFilter(), limit=1).counts),
        "breakers": get(lambda: [b for b in breaker_report(settings) if b.status is not BreakerStatus.CLOSED]),
        "workers": reads.from_log(lambda: _workers(reads), "workers"),
        "view_lag": reads.view_lag(),
        "window_min": RECENT_WINDOW_S // 60,
        "read_at": time.time(),
    }


def _recent(reads: Reads) -> dict[str, Any]:
    activity = reads.recent().read(int(time.time() * 1_000_000))
    rows = [{"task_type": kind, "succeeded": outcomes["succeeded"], "failed": outcomes["failed"],
             "dead": outcomes["dead"], "lateness": _figures(kind, buckets) if buckets else None}
            for kind, outcomes, buckets in activity.rows()]
    everything = activity.all_lateness()
    return {"rows": rows, "all": _figures("all task types", everything) if everything else None}


def _figures(task_type: str, buckets: Counter[int]) -> LatenessFigures:
    starts = sum(buckets.values())
    return LatenessFigures(task_type, starts, quantile(buckets, 50) / 1000, quantile(buckets, 99) / 1000)


def _workers(reads: Reads) -> list[Any]:
    from engine.runtime.read.workers import list_workers

    return list_workers(reads.settings)


def partitions_of(workers: Got[list[Any]]) -> list[tuple[Any, Any]]:
    """(partition row, its worker) of every partition an instance holds, by partition."""
    rows = [(p, w) for w in workers.value or [] for p in w.partitions]
    return sorted(rows, key=lambda pw: pw[0].partition)
