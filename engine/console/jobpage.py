"""A job's page: its record, why it waits, its progress, its labels, its history with the progress reports folded.

Pure helpers (:func:`folded_timeline`, :func:`pretty`, :func:`duration`) shape what the reads return;
the page itself reads through :mod:`engine.console.reads` and the client, like every page.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from engine.console.got import Got, get
from engine.console.reads import job_holdup, job_record
from engine.console.web import problem_page, reads_of, render

FINAL_STATES = frozenset({"completed", "dead", "cancelled", "partial", "rejected"})
"""A job in one of these changes no more by itself: its page stops refreshing."""
WAITING = frozenset({"queued", "pending", "scheduled", "retrying"})
SHOWN_DEPENDENCIES = 100
"""Dependencies (and dependents) a job's page lists; the count says how many more there are."""


def job_page(request: Request) -> Response:
    """A job: its record, its history as a timeline, and the actions that apply to it."""
    return _job(request, "job.html")


def job_live(request: Request) -> Response:
    """A job's record and timeline alone (what htmx swaps in every 2 s until the job is final)."""
    return _job(request, "_job_live.html")


def _job(request: Request, template: str) -> Response:
    job_id = request.path_params["job_id"]
    reads = reads_of(request)
    record = get(lambda: job_record(reads.settings, job_id))
    outcome = reads.from_log(lambda: _status(reads.settings, job_id))
    if record.value is None and (outcome.value is None or not outcome.value.known):
        if outcome.problem and not record.problem:
            return problem_page(request, 404, f"job {job_id} is not in this state directory's projections, "
                                              f"and its history cannot be read: {outcome.problem}")
        return problem_page(request, 404, f"no job {job_id}: not in this state directory's projections, "
                                          "and no event of it in the log")
    details = _job_details(record, outcome)
    if details["status"] in WAITING and details["job"] is not None:
        job, partition = details["job"], details["partition"]
        details["holdup"] = get(lambda: reads.cache.get(
            ("holdup", job.task_type, partition), lambda: job_holdup(reads.settings, job.task_type, partition)))
    return render(request, template, {"page": "jobs", "job_id": job_id, "record": record, "outcome": outcome,
                                        "live": template == "_job_live.html", **details})


def _status(settings: Any, job_id: str) -> Any:
    from engine.client import Client

    with Client(settings) as client:
        return client.status(job_id)


def _job_details(record: Got[Any], outcome: Got[Any]) -> dict[str, Any]:
    from engine.questions.logged import event_json

    job = record.value[1] if record.value else None
    status = job.state.value if job is not None else (outcome.value.status if outcome.value else "unknown")
    logged = outcome.value.events if outcome.value else []
    events = [{**event_json(e), "at_us": e.event.occurred_at} for e in logged]
    return {"job": job, "partition": record.value[0] if record.value else None, "status": status,
            "timeline": folded_timeline(events), "attempt_errors": attempt_errors(job, events),
            "payload": pretty(_payload(job, outcome.value)),
            "result": pretty(_result(job, outcome.value)), "labels": _labels(logged),
            "trace_id": _trace_id(job, logged),
            "progress": _progress(job, status), "holdup": None, **dependency_rows(outcome.value),
            "can_cancel": status in ("scheduled", "queued", "running", "retrying", "pending", "waiting"),
            "can_reschedule": status in ("scheduled", "retrying"), "can_replay": status == "dead",
            "final": status in FINAL_STATES}


def dependency_rows(outcome: Any) -> dict[str, Any]:
    """What a job waits for (each dependency with how it ended, as the job was told: ``pending`` until then) and
    the jobs that wait for it, the first SHOWN_DEPENDENCIES of each, with their counts."""
    dependencies = list((outcome.dependencies if outcome is not None else {}).items())
    dependents = list(outcome.dependents if outcome is not None else [])
    return {"dependencies": [{"job_id": j, "status": s} for j, s in dependencies[:SHOWN_DEPENDENCIES]],
            "dependency_count": len(dependencies),
            "dependency_pending": sum(1 for _, s in dependencies if s == "pending"),
            "dependents": dependents[:SHOWN_DEPENDENCIES], "dependent_count": len(dependents)}


def attempt_errors(job: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each failed attempt, oldest first: attempt, when, how long it ran, its error and the traceback the worker
    sent. From the log's ``JobFailed`` events (fenced ones left out) when the history was read, else from the
    record's errors (the view keeps every attempt's error with its traceback)."""
    failed = [e for e in events if e["type"] == "JobFailed" and not e["fenced"]]
    if failed:
        return [{"attempt": e["detail"].get("attempt"), "at_us": e["at_us"], "error_type": e["detail"]["error_type"],
                 "message": e["detail"]["message"], "traceback": e["detail"].get("traceback", ""),
                 "duration_us": e["detail"].get("duration_us", 0)} for e in failed]
    return [{"attempt": a.attempt, "at_us": a.failed_at, "error_type": a.error_type, "message": a.message,
             "traceback": a.traceback, "duration_us": a.duration_us} for a in (job.errors if job else ())]


def folded_timeline(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timeline with each run of ``JobProgressed`` rows folded into its latest, which counts the reports."""
    out: list[dict[str, Any]] = []
    for event in events:
        if event["type"] == "JobProgressed" and out and out[-1]["type"] == "JobProgressed":
            event = {**event, "reports": out[-1]["reports"] + 1}
            out[-1] = event
        else:
            out.append({**event, "reports": 1} if event["type"] == "JobProgressed" else event)
    return out


def pretty(text: str | None) -> str | None:
    """JSON text indented two spaces (keys in their order); any other text as it is."""
    if text is None:
        return None
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def duration(seconds: float) -> str:
    """A duration as ``45 s``, ``12 min 5 s``, ``3 h 20 min``."""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _progress(job: Any, status: str) -> dict[str, Any] | None:
    """A running job's latest report as a bar (value 0..1, or None), its message, and how long it has run."""
    if job is None or status != "running":
        return None
    value, message = job.progress if job.progress else (None, "")
    running_for = duration(time.time() - job.started_at / 1e6) if job.started_at else ""
    fraction = min(max(value, 0.0), 1.0) if value is not None else None
    return {"value": fraction, "message": message, "running_for": running_for, "reported": job.progress is not None}


def _payload(job: Any, outcome: Any) -> str:
    if job is not None:
        return str(job.payload.data.decode("utf-8", "replace"))
    for logged in outcome.events if outcome else []:
        payload = getattr(logged.event.body, "payload", None)
        if payload is not None:
            return str(payload.data.decode("utf-8", "replace"))
    return ""


def _result(job: Any, outcome: Any) -> str | None:
    if job is not None and job.result is not None:
        return str(job.result.decode("utf-8", "replace"))
    if outcome is not None and outcome.result is not None:
        return json.dumps(outcome.result)
    return None


def _trace_id(job: Any, logged: list[Any]) -> str | None:
    """The submitter's trace id (``JobSubmitted.traceparent``, docs/tracing.md), if it traced the submit."""
    from engine.questions.traces import job_trace_id

    return job_trace_id(job, logged)


def _labels(logged: list[Any]) -> dict[str, str]:
    for entry in logged:
        labels = getattr(entry.event.body, "labels", None)
        if labels:
            return dict(labels)
    return {}
