"""Traces from submit to handler: the real OpenTelemetry SDK and its in-memory exporter, a real broker."""

from __future__ import annotations

import threading
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
from engine.config import Settings
from engine.contract import messages as m
from engine.runtime.loop.engine import Engine
from engine.runtime.loop.options import EngineOptions
from engine.questions.traces import trace_id

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
