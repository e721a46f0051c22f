"""The jobs list: the catalog one page at a time (first, newer and older pages, "x–y of N"), a search by job id or
id prefix, and the submissions refused at admission (``rejected``: they have no record, so they come from the log's
recent window). The list refreshes itself every few seconds (htmx, as the job page does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from engine.console import params
from engine.console.got import get
from engine.console.reads import CHART_WINDOW_S, job_list, jobs_by_id
from engine.console.web import reads_of, render
from engine.questions.jobs import STATUSES, JobRow

LIST_STATUSES = (*STATUSES, "rejected")
PAGE_ROWS, MOST_ROWS = 50, 1000
FIRST = "-"
"""The trail's mark for the first page (it has no cursor)."""
FILTERS = ("status", "tenant", "type", "since", "until", "label", "id", "limit")


@dataclass
class Listing:
    """What the list shows, whichever source answered: rows, counts per status, where the page is, links."""

    rows: list[Any]
    counts: dict[str, int | None] = field(default_factory=dict)
    total: int = 0
    first: int = 0
    exact: bool = True
    links: dict[str, str] = field(default_factory=dict)  # first, prev, next: URLs
    note: str = ""
    partitions: list[int] = field(default_factory=list)


def jobs_page(request: Request) -> Response:
    """Jobs: the search, counts per status, one page of rows with its place among them."""
    return render(request, "jobs.html", _context(request))


def jobs_live(request: Request) -> Response:
    """The list's live part alone (what htmx swaps in every few seconds)."""
    return render(request, "_jobs_live.html", _context(request))


def _context(request: Request) -> dict[str, Any]:
    query = dict(request.query_params)
    filters = {k: query[k] for k in FILTERS if query.get(k)}
    reads = reads_of(request)
    status, id_prefix = params.text(query, "status"), params.text(query, "id")
    if id_prefix:
        listing = get(lambda: _by_id(reads.settings, id_prefix))
    elif status == "rejected":
        listing = reads.from_log(lambda: _rejected(reads, query, filters))
    else:
        listing = get(lambda: _catalog(reads.settings, query, filters))
    rejected = None if id_prefix or status == "rejected" else reads.from_log(lambda: _rejected_count(reads, query))
    if listing.value is not None and rejected is not None:
        listing.value.counts["rejected"] = rejected.value
    return {"page": "jobs", "statuses": LIST_STATUSES, "result": listing, "q": filters,
            "base_query": urlencode({k: v for k, v in filters.items() if k != "status"}),
            "live_query": urlencode({k: v for k, v in query.items() if k != "flash"})}


def _catalog(settings: Any, query: dict[str, str], filters: dict[str, str]) -> Listing:
    limit = params.limit(query, PAGE_ROWS, MOST_ROWS)
    trail = [c for c in (query.get("trail") or "").split(",") if c]
    cursor = params.text(query, "cursor")
    page = job_list(settings, params.job_filter(query), cursor, limit)
    status = filters.get("status")
    total = page.counts.get(status, 0) if status else sum(page.counts.values())
    listing = Listing(page.rows, dict(page.counts), total, len(trail) * limit, page.counts_exact,
                      partitions=page.partitions)
    listing.links = trail_links(filters, trail, cursor, page.next_cursor)
    return listing


def trail_links(filters: dict[str, str], trail: list[str], cursor: str | None,
                next_cursor: str | None) -> dict[str, str]:
    """The first, newer and older pages' URLs: ``trail`` holds the cursor of each page before this one (FIRST
    for the first page), so going back needs no state on the server."""
    base = "/jobs?" + urlencode(filters)
    links: dict[str, str] = {}
    if trail:
        links["first"] = base
        back = trail[-1]
        links["prev"] = base + _paging(None if back == FIRST else back, trail[:-1])
    if next_cursor:
        links["next"] = base + _paging(next_cursor, [*trail, cursor or FIRST])
    return links


def _paging(cursor: str | None, trail: list[str]) -> str:
    parts = {**({"cursor": cursor} if cursor else {}), **({"trail": ",".join(trail)} if trail else {})}
    return "&" + urlencode(parts) if parts else ""


def _by_id(settings: Any, prefix: str) -> Listing:
    rows = jobs_by_id(settings, prefix)
    note = f"jobs whose id starts with {prefix!r}" + (" (the first 50, by id)" if len(rows) >= 50 else "")
    return Listing(rows, {}, len(rows), 0, len(rows) < 50, note=note)


def _rejections(reads: Any, query: dict[str, str]) -> list[Any]:
    """The recent window's rejections (newest first) that the filter admits (tenant, task type, time)."""
    flt = params.job_filter({k: v for k, v in query.items() if k != "status"})
    return [r for r in reads.activity(CHART_WINDOW_S).rejected
            if (flt.tenant is None or r.tenant == flt.tenant)
            and (flt.task_type is None or r.task_type == flt.task_type)
            and (flt.since_us is None or r.at_us >= flt.since_us) and (flt.until_us is None or r.at_us < flt.until_us)]


def _rejected_count(reads: Any, query: dict[str, str]) -> int:
    return len(_rejections(reads, query))


def _rejected(reads: Any, query: dict[str, str], filters: dict[str, str]) -> Listing:
    limit = params.limit(query, PAGE_ROWS, MOST_ROWS)
    start = int(params.positive(query.get("start"), "start", 1)) - 1
    found = _rejections(reads, query)
    rows = [JobRow(r.job_id, r.tenant, r.task_type, "rejected", 0, "", 0, r.at_us, None, r.at_us, -1,
                   f"{r.reason}: {r.detail}" if r.detail else r.reason) for r in found[start:start + limit]]
    base = "/jobs?" + urlencode(filters)
    links = {**({"first": base, "prev": base + f"&start={max(start - limit, 0) + 1}"} if start else {}),
             **({"next": base + f"&start={start + limit + 1}"} if start + limit < len(found) else {})}
    note = f"refused at admission in the last {CHART_WINDOW_S // 3600} hours (from the log; the newest 1000)"
    return Listing(rows, {"rejected": len(found)}, len(found), start, True, links, note)
