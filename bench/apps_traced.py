"""The benchmarks' handlers in an engine that traces (docs/tracing.md): the real OpenTelemetry SDK, spans
recorded and dropped (no exporter), so a run measures the engine's tracing cost and not an exporter's."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from bench.apps import app

trace.set_tracer_provider(TracerProvider())

__all__ = ["app"]
