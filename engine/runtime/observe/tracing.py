"""Traces from submit to handler, when OpenTelemetry is installed (``pip install epochq[otel]``).

- ``Client.submit`` puts the current span's W3C ``traceparent`` on the ``SubmitJob``
  (:func:`current_traceparent`); the engine copies it onto ``JobSubmitted`` and keeps it with the job.
- Each attempt runs in a span (:func:`run_traced`) that is a child of that context and linked to
  it, named ``<task type> process``, with the task type, tenant, job id, attempt, outcome and error
  as attributes; the handler's own spans are its children. Its outcome carries the span's context.
- Every event of a traced job carries a ``traceparent`` record header (``engine.runtime.loop.partition``):
  the events an attempt's outcome decides carry the attempt span's context, the others the submitter's.
- The console's job page shows the trace id (``engine.questions.traces``, pure: no OpenTelemetry needed).

Without OpenTelemetry, or with no tracer provider set (nobody configured the SDK), nothing is
traced and an attempt pays one test.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.runtime.execution.context import JobContext
    from engine.runtime.execution.verdicts import AttemptOutcome

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: nothing is traced
    trace = None  # type: ignore[assignment]

TRACER_NAME = "epochq"
_PROPAGATOR: Any = TraceContextTextMapPropagator() if trace is not None else None
_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ  # a provider named there is loaded on first use
_ON = False
_TRACER: Any = None


def current_traceparent() -> str | None:
    """The ``traceparent`` of the span current in the caller, or None (no OpenTelemetry, no valid span)."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def tracing() -> bool:
    """Whether attempts are traced now: OpenTelemetry is installed and a tracer provider was set.

    Asked before every attempt, so it costs a global's test until a provider is set (OpenTelemetry's own
    ``get_tracer_provider`` reads the environment each time it finds none), and nothing once one is."""
    global _ON
    if _ON:
        return True
    if trace is None or (getattr(trace, "_TRACER_PROVIDER", None) is None and not _FROM_ENVIRONMENT):
        return False
    _ON = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # set once: it never changes
    return _ON


def run_traced(call: Callable[[], AttemptOutcome], ctx: JobContext) -> AttemptOutcome:
    """``call()`` (one attempt) inside its span, when tracing; the outcome recorded on the span."""
    if not tracing():
        return call()
    with _start(ctx) as span:
        outcome = call()
        _record(span, outcome)
        return _spanned(outcome) if ctx.traceparent else outcome


async def run_traced_async(call: Callable[[], Awaitable[AttemptOutcome]], ctx: JobContext) -> AttemptOutcome:
    """:func:`run_traced` for an ``async def`` handler's attempt."""
    if not tracing():
        return await call()
    with _start(ctx) as span:
        outcome = await call()
        _record(span, outcome)
        return _spanned(outcome) if ctx.traceparent else outcome


def _start(ctx: JobContext) -> Any:
    parent = _PROPAGATOR.extract({"traceparent": ctx.traceparent}) if ctx.traceparent else None
    submitted = trace.get_current_span(parent).get_span_context() if parent is not None else None
    links = [trace.Link(submitted)] if submitted is not None and submitted.is_valid else []
    attributes: dict[str, Any] = {
        "epochq.task_type": ctx.task_type, "epochq.tenant": ctx.tenant, "epochq.job_id": ctx.job_id,
        "epochq.attempt": ctx.attempt, "epochq.epoch": ctx.epoch, "epochq.partition": ctx.partition,
        "messaging.system": "kafka", "messaging.operation.type": "process",
    }
    return _tracer().start_as_current_span(f"{ctx.task_type} process", context=parent, kind=trace.SpanKind.CONSUMER,
                                        links=links, attributes=attributes)


def _tracer() -> Any:
    """The engine's tracer, made once (the SDK makes a new one on every ``get_tracer``: 9 µs an attempt)."""
    global _TRACER
    if _TRACER is None:
        _TRACER = trace.get_tracer(TRACER_NAME)
    return _TRACER


def _spanned(outcome: AttemptOutcome) -> AttemptOutcome:
    """``outcome`` with the attempt span's context (current here): the events it decides carry it (a traced
    job's only: an untraced job's attempt is a root span, and its events carry no context)."""
    return replace(outcome, traceparent=current_traceparent())


def _record(span: Any, outcome: AttemptOutcome) -> None:
    span.set_attribute("epochq.outcome", outcome.kind.value)
    if outcome.error_type:
        span.set_attribute("epochq.error", f"{outcome.error_type}: {outcome.message}")
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{outcome.error_type}: {outcome.message}"))
