"""The console's pages (GET): each reads through :mod:`engine.console.reads` and renders one template."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engine.console.charts import histogram_counts, histogram_svg, share_svg, weighted_counts
from engine.console.got import get
from engine.console.overview import overview, partitions_of
from engine.console.reads import holdups_now
from engine.console.web import reads_of, render
from engine.questions.jobs import list_jobs
from engine.questions.stores import queue_report

LATENESS_WINDOWS = {"15m": 15 * 60, "1h": 3600, "24h": 86400, "all": None}


def overview_page(request: Request) -> Response:
    """Overview: the live figures, refreshed by htmx every few seconds."""
    return render(request, "overview.html", _overview_context(request))


def overview_live(request: Request) -> Response:
    """The overview's live part alone (what htmx swaps in)."""
    return render(request, "_overview_live.html", _overview_context(request))


def _overview_context(request: Request) -> dict[str, Any]:
    data = overview(reads_of(request))
    return {**data, "partitions": partitions_of(data["workers"]), "page": "overview"}


def schedules_page(request: Request) -> Response:
    """Schedules: each with its next occurrences in its own zone and in UTC, its last runs, pause/resume."""
    from engine.questions.schedules import schedules

    reads = reads_of(request)
    found = get(lambda: schedules(reads.settings))
    holdups = get(lambda: holdups_now(reads.settings))
    paused = {pause.task_type for _, pause in holdups.value.paused} if holdups.value else set()
    rows = [_schedule_row(reads, view, paused) for view in found.value or []]
    return render(request, "schedules.html", {"page": "schedules", "found": found, "rows": rows,
                                              "holdups": holdups})


def schedule_state(enabled: bool, task_type: str, paused_types: set[str]) -> str:
    """What a schedule's state cell says: ``paused`` (the schedule), ``task-paused`` (it fires, but its task type
    is paused, so every occurrence waits), or ``enabled``. Pure."""
    if not enabled:
        return "paused"
    return "task-paused" if task_type in paused_types else "enabled"


def _schedule_row(reads: Any, view: Any, paused_types: set[str]) -> dict[str, Any]:
    from engine.questions.schedules import next_runs

    upcoming = get(lambda: next_runs(view, int(time.time() * 1_000_000), 5))
    return {"view": view, "upcoming": upcoming, "runs": get(partial(_last_runs, reads.settings, view)),
            "state": schedule_state(view.enabled, view.task_type, paused_types)}


def _last_runs(settings: Any, view: Any, count: int = 5) -> list[Any]:
    """The schedule's newest occurrence jobs (any status), from the catalog: each carries the schedule's label."""
    from engine.questions.schedules import runs_filter

    return list_jobs(settings, runs_filter(view), limit=count).rows


def tenants_page(request: Request) -> Response:
    """Tenants: weight, queued, running, and served share against weight as a chart per lane."""
    reads = reads_of(request)
    table = reads.from_log(lambda: _tenant_table(reads.settings), "tenants")
    queues = get(lambda: queue_report(reads.settings))
    weights = {t: c.weight for t, c in (table.value or {}).items()}
    names = sorted(set(weights) | {t for lane in (queues.value or {}).values() for t in lane["tenants"]})
    running = {t: get(partial(_running, reads.settings, t)) for t in names}
    rows = [{"tenant": t, "config": (table.value or {}).get(t), "weight": weights.get(t, 1.0),
             "queued": sum(lane["tenants"].get(t, {}).get("queued", 0) for lane in (queues.value or {}).values()),
             "running": running[t]} for t in names]
    charts = {lane: share_svg(_shares(report["tenants"], weights), f"{lane}: served share against weight")
              for lane, report in (queues.value or {}).items() if report["tenants"]}
    return render(request, "tenants.html", {"page": "tenants", "table": table, "queues": queues, "rows": rows,
                                            "charts": charts})


def _tenant_table(settings: Any) -> dict[str, Any]:
    from engine.questions.tenants import tenant_table

    return tenant_table(settings, timeout=5.0)


def _running(settings: Any, tenant: str) -> int:
    from engine.questions.jobs import JobFilter

    return list_jobs(settings, JobFilter(status="running", tenant=tenant), limit=1).counts.get("running", 0)


def _shares(tenants: dict[str, dict[str, float]], weights: dict[str, float]) -> list[tuple[str, float, float]]:
    """(tenant, share of starts served, share its weight entitles it to) among the tenants of one lane."""
    total = sum(weights.get(t, 1.0) for t in tenants) or 1.0
    return [(t, float(row.get("share", 0.0)), weights.get(t, 1.0) / total) for t, row in sorted(tenants.items())]


def workers_page(request: Request) -> Response:
    """Workers: each engine instance, its partitions with epoch and phase, its slots, the jobs it runs."""
    from engine.questions.workers import list_workers

    reads = reads_of(request)
    workers = reads.from_log(lambda: list_workers(reads.settings), "workers")
    return render(request, "workers.html", {"page": "workers", "workers": workers})


def lateness_page(request: Request) -> Response:
    """Lateness: a histogram per task type of how long after its due time each attempt started.

    The last 15 minutes come from the overview's window (tallies 2 % wide, nothing read again);
    a longer window reads the log (exact figures; ``epochq lateness --since``).
    """
    reads = reads_of(request)
    window = request.query_params.get("window", "15m")
    window = window if window in LATENESS_WINDOWS else "15m"
    if window == "15m":
        rows = reads.from_log(lambda: _recent_lateness(reads))
    else:
        rows = reads.from_log(lambda: _logged_lateness(reads, LATENESS_WINDOWS[window]), ("lateness", window))
    return render(request, "lateness.html", {"page": "lateness", "values": rows, "rows": rows.value or [],
                                             "window": window, "windows": list(LATENESS_WINDOWS),
                                             "approximate": window == "15m"})


def _recent_lateness(reads: Any) -> list[dict[str, Any]]:
    from engine.questions.lateness import QUANTILES, Lateness
    from engine.questions.recent import bucket_value, quantile

    activity = reads.activity()
    rows = []
    for kind, _, buckets in activity.rows():
        if not buckets:
            continue
        pairs = [(bucket_value(b), n) for b, n in buckets.items()]
        count = sum(buckets.values())
        figures = Lateness(kind, count, {q: quantile(buckets, q) for q in QUANTILES}, bucket_value(max(buckets)),
                           sum(v * n for v, n in pairs) / count)
        rows.append({"figures": figures, "chart": histogram_svg(weighted_counts(pairs), f"{kind}: lateness")})
    return rows


def _logged_lateness(reads: Any, seconds: int | None) -> list[dict[str, Any]]:
    from engine.questions.lateness import collect, summarize

    since = None if seconds is None else int((time.time() - seconds) * 1_000_000)
    return [{"figures": summarize(kind, vals), "chart": histogram_svg(histogram_counts(vals), f"{kind}: lateness")}
            for kind, vals in sorted(collect(reads.settings, since_us=since).items())]
