"""Traces from submit to handler: the real OpenTelemetry SDK and its in-memory exporter, a real broker."""

from __future__ import annotations

import threading
from pathlib import Path
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from engine import App, JobContext, RetryPolicy
from engine.client import Client
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.contract.partitioner import partition_for
from engine.runtime import kafka
from engine.runtime.loop.engine import Engine
from engine.runtime.loop.options import EngineOptions
from engine.questions.audit import AuditFilter, audit_events
from engine.questions.history import job_history
from engine.questions.logged import event_json
from engine.questions.traces import trace_id
from tests.integration.conftest import eventually

EXPORTER = InMemorySpanExporter()
app = App()


@app.task("traced.ok")
def traced_ok(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    with trace.get_tracer("handler").start_as_current_span("charge card"):
        return {"traceparent": ctx.traceparent}


@app.task("traced.fail", retry=RetryPolicy(max_attempts=2, base_delay=0.05, jitter=0.0))
async def traced_fail(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise ConnectionError(f"ledger down (attempt {ctx.attempt})")


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's tracer provider (set once per process, as OpenTelemetry allows) exporting to memory."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    return EXPORTER


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """An engine in this process (so that its spans reach the exporter), stopped afterwards."""
    running = Engine(app, settings, EngineOptions(grace_s=2.0), owner_id="traced")
    thread = threading.Thread(target=running.run, name="traced-engine")
    thread.start()
    yield running
    running.stop()
    thread.join(30)


def spans_named(exporter: InMemorySpanExporter, name: str, count: int) -> list[ReadableSpan]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(found) >= count:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {count} span(s) named {name}: {[s.name for s in exporter.get_finished_spans()]}")


def test_each_attempt_runs_in_a_span_of_the_submitter_s_trace(exporter: InMemorySpanExporter, engine: Engine,
                                                             client: Client) -> None:
    exporter.clear()
    with trace.get_tracer("shop").start_as_current_span("checkout") as checkout:
        ok = client.submit("traced.ok", {}, tenant="acme")
        failing = client.submit("traced.fail", {}, tenant="acme")
    untraced = client.submit("traced.ok", {}, tenant="acme")
    root = checkout.get_span_context()
    traceparent = f"00-{root.trace_id:032x}-{root.span_id:016x}-{root.trace_flags:02x}"

    done = ok.wait(60)
    assert done.status == "completed" and done.result == {"traceparent": traceparent}
    assert failing.wait(60).status == "dead" and untraced.wait(60).status == "completed"
    submitted = next(e.event.body for e in client.status(ok.job_id).events if e.event.type == "JobSubmitted")
    assert isinstance(submitted, m.JobSubmitted) and submitted.traceparent == traceparent
    assert trace_id(submitted.traceparent) == f"{root.trace_id:032x}"

    attempts = spans_named(exporter, "traced.ok process", 2)
    (span,) = [s for s in attempts if s.attributes and s.attributes["epochq.job_id"] == ok.job_id]
    assert span.context.trace_id == root.trace_id and span.parent is not None and span.parent.span_id == root.span_id
    assert [link.context.span_id for link in span.links] == [root.span_id]
    assert span.kind is trace.SpanKind.CONSUMER
    assert {k: span.attributes[k] for k in ("epochq.task_type", "epochq.tenant", "epochq.attempt",  # type: ignore[index]
                                            "epochq.outcome")} == {
        "epochq.task_type": "traced.ok", "epochq.tenant": "acme", "epochq.attempt": 1, "epochq.outcome": "succeeded"}
    inner = [s for s in spans_named(exporter, "charge card", 2)
             if s.parent and s.parent.span_id == span.context.span_id]
    assert len(inner) == 1 and inner[0].context.trace_id == root.trace_id  # the handler's spans are the attempt's

    (alone,) = [s for s in attempts if s.attributes and s.attributes["epochq.job_id"] == untraced.job_id]
    assert alone.parent is None and not alone.links and alone.context.trace_id != root.trace_id

    fails = sorted(spans_named(exporter, "traced.fail process", 2), key=lambda s: s.attributes["epochq.attempt"])  # type: ignore[index]
    assert [s.attributes["epochq.attempt"] for s in fails] == [1, 2]  # type: ignore[index]
    assert all(s.context.trace_id == root.trace_id for s in fails)
    assert all(s.attributes["epochq.outcome"] == "failed" for s in fails)  # type: ignore[index]
    assert fails[1].attributes["epochq.error"] == "ConnectionError: ledger down (attempt 2)"  # type: ignore[index]
    assert fails[1].status.status_code is trace.StatusCode.ERROR


ATTEMPT_EVENTS = {"JobSucceeded", "JobFailed", "JobRetryScheduled", "JobDeadLettered"}
"""The events an attempt's outcome decides: they carry the attempt span's context, the others the submitter's."""


def committed_headers(settings: Settings, job_id: str) -> list[tuple[str, int | None, str | None]]:
    """(event type, attempt, its traceparent header) of each committed record of the job (read_committed)."""
    consumer = kafka.events_reader(settings, "test-traced")
    try:
        p = partition_for(job_id, 3)
        out = []
        for msg in kafka.scan_messages(consumer, settings.events_topic, p):
            event = decode_event_at(msg.value(), settings.events_topic, p, msg.offset())
            if event.job_id == job_id:
                attempt = getattr(event.body, "attempt", None)
                out.append((event.type, attempt, kafka.header(msg, "traceparent")))
        return out
    finally:
        consumer.close()


def test_every_event_of_a_traced_job_carries_the_traceparent_header(exporter: InMemorySpanExporter, engine: Engine,
                                                                    client: Client, settings: Settings,
                                                                    tmp_path: Path) -> None:
    exporter.clear()
    with trace.get_tracer("shop").start_as_current_span("checkout") as checkout:
        ok = client.submit("traced.ok", {}, tenant="acme")
        failing = client.submit("traced.fail", {}, tenant="acme")
    untraced = client.submit("traced.ok", {}, tenant="acme")
    assert ok.wait(60).status == "completed" and failing.wait(60).status == "dead"
    assert untraced.wait(60).status == "completed"
    root = checkout.get_span_context()
    submitter = f"00-{root.trace_id:032x}-{root.span_id:016x}-{root.trace_flags:02x}"
    spans = spans_named(exporter, "traced.ok process", 2) + spans_named(exporter, "traced.fail process", 2)
    attempt_span = {(s.attributes["epochq.job_id"], s.attributes["epochq.attempt"]):  # type: ignore[index]
                    f"00-{s.context.trace_id:032x}-{s.context.span_id:016x}-{s.context.trace_flags:02x}" for s in spans}

    for job in (ok, failing):
        records = eventually(lambda j=job.job_id: (r := committed_headers(settings, j)) and r[-1][0] in (  # type: ignore[misc]
            "JobSucceeded", "JobDeadLettered") and r, what=f"the end of job {job.job_id} in the log")
        assert {t for t, _, _ in records} >= {"JobSubmitted", "JobQueued", "JobStarted"}
        ended = 0  # the attempt whose outcome decided the events that follow it (a retry's, a dead letter)
        for event_type, attempt, traceparent in records:
            ended = attempt if event_type in ("JobSucceeded", "JobFailed") and attempt else ended
            if event_type in ATTEMPT_EVENTS:  # a consumer of this event continues the trace under the attempt
                assert traceparent == attempt_span[(job.job_id, ended)], (event_type, ended)
            else:
                assert traceparent == submitter, event_type
    assert [t for t, _, _ in committed_headers(settings, failing.job_id)].count("JobFailed") == 2

    plain = committed_headers(settings, untraced.job_id)
    assert plain and all(traceparent is None for _, _, traceparent in plain)

    # `epochq history` and the audit show each event's header: through the engine's stores (their indexes)
    # and, from a directory without stores, by scanning the log
    bare = load_settings(bootstrap=settings.bootstrap, namespace=settings.namespace, state_dir=str(tmp_path / "bare"))
    for job, where in ((j, s) for j in (ok, failing, untraced) for s in (settings, bare)):
        logged = [tp for _, _, tp in committed_headers(settings, job.job_id)]
        assert [e.traceparent for e in job_history(where, job.job_id)] == logged
        audited = [a.logged for a in audit_events(where, AuditFilter("acme")) if a.logged.event.job_id == job.job_id]
        assert [e.traceparent for e in audited] == logged
        assert [event_json(e)["traceparent"] for e in audited] == logged
