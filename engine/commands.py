"""Building commands on the client side: envelopes and due times from what a caller passes."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

from engine.contract import messages as m
from engine.errors import ValidationError


def new_command(job_id: str, tenant: str, body: m.CommandBody, correlation_id: str | None = None) -> m.Command:
    """A command envelope with a fresh id, issued now."""
    return m.Command(str(uuid.uuid4()), job_id, tenant, time.time_ns() // 1000, body, correlation_id)


def due_us(run_at: datetime | float | None, delay: float | None) -> int | None:
    """A due time in µs from ``run_at`` (aware datetime or epoch seconds) or ``delay`` seconds; None if neither."""
    if run_at is not None and delay is not None:
        raise ValidationError("run_at/delay: give one of them, not both")
    if delay is not None:
        return time.time_ns() // 1000 + int(delay * 1_000_000)
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise ValidationError("run_at: datetime must be timezone-aware")
        return int(run_at.timestamp() * 1_000_000)
    return int(run_at * 1_000_000) if run_at is not None else None
