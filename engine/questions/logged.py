"""An event as a reader of the log sees it: its offset and the fold's verdict. No Kafka client needed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.contract import messages as m


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with its place in the log and the fold's verdict on it."""

    offset: int
    event: m.Event
    fenced: bool = False
    traceparent: str | None = None  # the record's ``traceparent`` header: a traced job's event (docs/tracing.md)


def event_json(logged: LoggedEvent) -> dict[str, Any]:
    """The stable JSON form of one history row (documented in docs/cli.md; the console's timeline reads it too)."""
    ev = logged.event
    body = {s: getattr(ev.body, s) for s in ev.body.__slots__}
    detail = {key: (value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
              for key, value in body.items() if key not in ("payload", "raw")}
    return {"offset": logged.offset, "time": iso_time(ev.occurred_at), "type": ev.type, "epoch": ev.epoch,
            "owner": ev.owner, "attempt": body.get("attempt", body.get("next_attempt")),
            "error": f"{body['error_type']}: {body['message']}" if "error_type" in body else None,
            "fenced": logged.fenced, "event_id": ev.event_id, "tenant": ev.tenant_id, "detail": detail,
            "traceparent": logged.traceparent}


def iso_time(us: int) -> str:
    """A time in µs as ISO-8601 UTC; the bare number when no date has it (a record admitted before the rules)."""
    try:
        return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{us} µs"
