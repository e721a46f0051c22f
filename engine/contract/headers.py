"""Record headers the engine writes on ``<ns>.events``: part of the wire contract (docs/contract.md)."""

from __future__ import annotations

TRACEPARENT = "traceparent"
"""A traced job's W3C trace context on each of its events (docs/tracing.md): OpenTelemetry's Kafka
instrumentations read it from this header, so a consumer of the events continues the job's trace."""
