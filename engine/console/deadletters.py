"""The dead-letter page: one page of dead jobs (newest death first), their error groups, and bulk replay or purge
of what a filter matches, sent only once the operator confirmed the count the confirmation page showed."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from engine.console import params
from engine.console.actions import form_field
from engine.console.got import get
from engine.console.reads import dead_letter_jobs, dead_letter_page
from engine.console.security import requested_by
from engine.console.web import reads_of, render

FIELDS = ("type", "tenant", "since", "until", "error")
"""The dead-letter filter's parameters (the error group is ``error``)."""
PAGE_ROWS, MOST_ROWS, GROUPS_SHOWN = 50, 500, 15
VERBS = {"replay": "sent for replay", "purge": "purged (given up: cancelled)"}


def dlq_page(request: Request) -> Response:
    """Dead letters: the filters, the error groups, one page of jobs; replay one, or replay/purge by filter."""
    return render(request, "dlq.html", _context(request))


def dlq_live(request: Request) -> Response:
    """The dead-letter page's live part alone (what htmx swaps in every few seconds)."""
    return render(request, "_dlq_live.html", _context(request))


def _context(request: Request) -> dict[str, Any]:
    query = request.query_params
    settings = reads_of(request).settings
    found = get(lambda: dead_letter_page(settings, params.dead_query(query), params.text(query, "after"),
                                         params.text(query, "before"), params.limit(query, PAGE_ROWS, MOST_ROWS)))
    filters = {k: query[k] for k in FIELDS if query.get(k)}
    others = {k: v for k, v in filters.items() if k != "error"}
    groups = [(message, count, "/dlq?" + urlencode({**others, "error": message}))
              for message, count in (found.value.groups if found.value else [])[:GROUPS_SHOWN]]
    return {"page": "dlq", "found": found, "q": filters, "filter_query": urlencode(filters), "groups": groups,
            "every_error": "/dlq?" + urlencode(others),
            "paging_query": urlencode({**filters, **({"limit": query["limit"]} if query.get("limit") else {})}),
            "live_query": urlencode({k: v for k, v in query.items() if k != "flash"})}


def replay_filtered(request: Request, form: FormData) -> Response:
    """Replay every dead job a filter admits, once the operator confirmed the count the page showed."""
    return _bulk(request, form, "replay")


def purge_filtered(request: Request, form: FormData) -> Response:
    """Give up (cancel) every dead job a filter admits, once the operator confirmed the count the page showed."""
    return _bulk(request, form, "purge")


def _bulk(request: Request, form: FormData, verb: str) -> Response:
    from engine.client import Client

    query = {k: form_field(form, k) for k in FIELDS}
    jobs = dead_letter_jobs(reads_of(request).settings, params.dead_query(query))
    confirmed = form_field(form, "confirm")
    if confirmed != str(len(jobs)):  # first ask, or the dead-letter queue changed since: ask (again)
        return render(request, "dlq_confirm.html", {"page": "dlq", "jobs": jobs, "q": query, "verb": verb,
                                                    "changed": bool(confirmed), "reason": form_field(form, "reason"),
                                                    "filter_query": urlencode({k: v for k, v in query.items() if v})})
    reason = form_field(form, "reason") or f"{verb} from the console"
    who = requested_by(getattr(request.state, "user", ""))
    with Client(reads_of(request).settings) as client:
        if verb == "replay":
            for job in jobs:
                client.replay(job.job_id, tenant=job.tenant_id, reason=reason, requested_by=who)
        else:
            client.cancel_many([(j.job_id, j.tenant_id) for j in jobs], reason=f"purge: {reason}", requested_by=who)
    return render(request, "done.html", {"page": "dlq", "line": f"{len(jobs)} job(s) {VERBS[verb]}",
                                         "back": "/dlq?" + urlencode({k: v for k, v in query.items() if v})})
