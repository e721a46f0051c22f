"""Which trace a job belongs to: the trace id of its submitter's W3C ``traceparent`` (docs/tracing.md).

Pure (no OpenTelemetry needed): the console's job page shows it. The spans themselves are made in
``engine.runtime.observe.tracing``.
"""

from __future__ import annotations

import re
from typing import Any

TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id(traceparent: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C ``traceparent``; None for none or a malformed one."""
    found = TRACEPARENT.match(traceparent or "")
    return found.group(1) if found and found.group(1) != "0" * 32 else None


def job_trace_id(job: Any, logged: list[Any]) -> str | None:
    """The trace id of a job's record (``JobView.traceparent``), else of its logged ``JobSubmitted``."""
    parents = [getattr(job, "traceparent", None)] + [getattr(e.event.body, "traceparent", None) for e in logged]
    return next((found for p in parents if (found := trace_id(p))), None)
