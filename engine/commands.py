"""Building commands on the client side: envelopes, due times and payloads from what a caller passes.

Every value is checked with the rules of :mod:`engine.contract.validation`, the ones the engine
admits by, so a bad value fails here with a ``ValidationError`` naming the field.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.contract import messages as m
from engine.contract.validation import check_delay, check_run_at, invalid
from engine.errors import ValidationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False)
# what JSONEncoder.encode builds per call (typeshed does not declare the C encoder)
_C_JSON = json.encoder.c_make_encoder and json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _JSON.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)


def now_us() -> int:
    """Wall-clock time in microseconds since 1970 (UTC): when a command is issued."""
    return time.time_ns() // 1000


def new_command(job_id: str, tenant: str, body: m.CommandBody, correlation_id: str | None = None) -> m.Command:
    """A command envelope with a fresh id, issued now."""
    return m.Command(str(uuid.uuid4()), job_id, tenant, now_us(), body, correlation_id)


def due_us(run_at: datetime | float | None, delay: float | None, now: int | None = None) -> int | None:
    """A due time in µs from ``run_at`` (aware datetime or epoch seconds) or ``delay`` seconds; None if neither.

    Checked like the engine checks it: from 1970 to 100 years ahead; a past ``run_at`` means now,
    a negative ``delay`` is an error.
    """
    if run_at is None and delay is None:
        return None
    now = now_us() if now is None else now
    if run_at is not None and delay is not None:
        raise invalid("run_at", "give run_at or delay, not both")
    if delay is not None:
        return now + int(check_delay(delay) * 1_000_000)
    return check_run_at(_run_at_us(run_at), now)


def _run_at_us(run_at: object) -> int:
    if isinstance(run_at, datetime):
        if run_at.tzinfo is None:
            raise invalid("run_at", "a datetime must be timezone-aware, e.g. datetime.now(timezone.utc)")
        return (run_at - EPOCH) // ONE_US
    if isinstance(run_at, bool) or not isinstance(run_at, (int, float)):
        raise invalid("run_at", f"must be an aware datetime or seconds since 1970, got {type(run_at).__name__}")
    if not math.isfinite(run_at):
        raise invalid("run_at", f"must be a finite number of seconds since 1970, got {run_at!r}")
    return round(run_at * 1_000_000)


def encode_payload(value: Any) -> m.Payload:
    """A job payload from a Python value: JSON for data, raw for bytes, a model's JSON for pydantic."""
    if isinstance(value, m.Payload):
        return value
    if isinstance(value, (bytes, bytearray)):
        return m.Payload(bytes(value), "application/octet-stream")
    if hasattr(value, "model_dump_json"):
        return m.Payload(value.model_dump_json().encode(), "application/json", type(value).__name__)
    try:
        text = "".join(_C_JSON(value, 0)) if _C_JSON else _JSON.encode(value)
        return m.Payload(text.encode())
    except (TypeError, ValueError, RecursionError) as e:
        raise ValidationError(f"payload: cannot be encoded as JSON: {e}", "payload") from e
