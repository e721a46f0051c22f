"""The overview's figures: the last 15 minutes per task type, lanes, dead letters, lateness, breakers, partitions."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from engine.console.got import Got, get
from engine.console.charts import timeseries_svg
from engine.console.reads import CHART_WINDOW_S, RECENT_WINDOW_S, Reads, holdups_now
from engine.questions.jobs import JobFilter, list_jobs
from engine.questions.recent import MINUTE_US, RecentActivity, Tally, quantile
from engine.questions.stores import queue_report, tripped_breakers


CHART_STEP_MIN = 10
"""Minutes per column of the throughput chart (3 hours: 18 columns)."""
CHARTS_SHOWN = 8
"""Task types the overview draws a chart for (the busiest)."""


@dataclass(frozen=True)
class LatenessFigures:
    """p50 and p99 (ms) of the starts of one task type (or of all), and how many starts they are over."""

    task_type: str
    starts: int
    p50_ms: float
    p99_ms: float


def overview(reads: Reads) -> dict[str, Any]:
    """Everything the overview shows, each part read on its own (kept a few seconds for every tab; past that, the
    kept answer is shown while the next one is read behind it, so a refresh never waits for the log)."""
    return reads.cache.get("overview", lambda: _overview(reads), renew_behind=True)  # type: ignore[no-any-return]


def _overview(reads: Reads) -> dict[str, Any]:
    settings = reads.settings
    recent = reads.from_log(lambda: _recent(reads))
    return {
        "recent": recent,
        "lanes": get(lambda: {lane: r["queued"] for lane, r in queue_report(settings).items()}),
        "counts": get(lambda: list_jobs(settings, JobFilter(), limit=1).counts),
        "breakers": get(lambda: tripped_breakers(settings)),
        "paused": get(lambda: sorted({pause.task_type for _, pause in holdups_now(settings).paused})),
        "workers": reads.from_log(lambda: _workers(reads), "workers"),
        "view_lag": reads.view_lag(),
        "window_min": RECENT_WINDOW_S // 60,
        "chart_hours": CHART_WINDOW_S // 3600,
        "read_at": time.time(),
    }


def _recent(reads: Reads) -> dict[str, Any]:
    activity = reads.activity(CHART_WINDOW_S)
    chart = throughput_chart(activity)
    activity = activity.last(int((time.time() - RECENT_WINDOW_S) * 1_000_000))
    rows = [{"task_type": kind, "succeeded": outcomes["succeeded"], "failed": outcomes["failed"],
             "dead": outcomes["dead"], "lateness": _figures(kind, buckets) if buckets else None}
            for kind, outcomes, buckets in activity.rows()]
    everything = activity.all_lateness()
    return {"rows": rows, "all": _figures("all task types", everything) if everything else None, "charts": chart}


def throughput_series(minutes: dict[int, Tally], end_minute: int, step_min: int = CHART_STEP_MIN,
                      steps: int = CHART_WINDOW_S // 60 // CHART_STEP_MIN) -> dict[str, list[tuple[int, int, int]]]:
    """Per task type, ``steps`` buckets of ``step_min`` minutes ending with ``end_minute``: (first minute, jobs
    succeeded, jobs dead-lettered), oldest first; only task types with something in them. Each job counts once, when
    it ends: a failed attempt is not an ending (the job is retried, or dead-lettered, which counts it), so a job
    that failed and then went dead is one dead letter, not a failure and a dead letter."""
    first = end_minute - steps * step_min + 1
    out: dict[str, list[list[int]]] = {}
    for minute, tally in minutes.items():
        if not first <= minute <= end_minute:
            continue
        i = (minute - first) // step_min
        for kind, counts in tally.outcomes.items():
            if not counts["succeeded"] and not counts["dead"]:
                continue
            row = out.setdefault(kind, [[first + n * step_min, 0, 0] for n in range(steps)])[i]
            row[1] += counts["succeeded"]
            row[2] += counts["dead"]
    return {kind: [(a, b, c) for a, b, c in rows] for kind, rows in sorted(out.items())}


@dataclass(frozen=True)
class ThroughputChart:
    """One task type's chart of the last hours, and the jobs it counts (succeeded, dead-lettered)."""

    task_type: str
    svg: Markup
    succeeded: int
    dead: int


def throughput_chart(activity: RecentActivity, most: int = CHARTS_SHOWN) -> list[ThroughputChart]:
    """The overview's charts: per task type (the busiest ``most``), jobs succeeded and dead-lettered per 10 min."""
    now_minute = int(time.time() * 1_000_000) // MINUTE_US
    end = (now_minute // CHART_STEP_MIN + 1) * CHART_STEP_MIN - 1  # columns start on the clock's 10 minutes
    series = throughput_series(activity.minutes, end)
    busiest = sorted(series.items(), key=lambda kv: -sum(ok + bad for _, ok, bad in kv[1]))[:most]
    return [ThroughputChart(kind, timeseries_svg([(_hhmm(start), ok, bad) for start, ok, bad in rows],
                                                 f"{kind}: jobs succeeded and dead-lettered per {CHART_STEP_MIN} min"),
                            sum(ok for _, ok, _ in rows), sum(bad for _, _, bad in rows))
            for kind, rows in busiest]


def _hhmm(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, UTC).strftime("%H:%M")


def _figures(task_type: str, buckets: Counter[int]) -> LatenessFigures:
    starts = sum(buckets.values())
    return LatenessFigures(task_type, starts, quantile(buckets, 50) / 1000, quantile(buckets, 99) / 1000)


def _workers(reads: Reads) -> list[Any]:
    from engine.questions.workers import list_workers

    return list_workers(reads.settings)


def partitions_of(workers: Got[list[Any]]) -> list[tuple[Any, Any]]:
    """(partition row, its worker) of every partition an instance holds, by partition."""
    rows = [(p, w) for w in workers.value or [] for p in w.partitions]
    return sorted(rows, key=lambda pw: pw[0].partition)
