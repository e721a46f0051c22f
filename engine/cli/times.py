"""The times the CLI reads: one parser for every flag, one wording for every error (docs/cli.md, *Times*).

A filter (``--since``, ``--until`` of ``jobs list``, ``dlq list|replay``, ``purge``, ``audit``, ``lateness``)
looks back: ``15m``, ``2h``, ``1d``, ``30s``, ``15m ago`` mean that long ago, and ISO-8601 without a zone
is UTC. A due time (``--run-at``) looks ahead: ``+5m`` or ``in 2h`` mean from now, ``5m ago`` is in the past
(queued now), and ISO-8601 needs a zone, since a job run an hour off is worse than a refusal.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import Enum

from engine.errors import ValidationError

DURATION = r"(\d+(?:\.\d+)?)\s*(s|sec|secs|m|min|mins|h|hr|hrs|d|days?)"
AHEAD = re.compile(rf"^(?:\+|in\s+){DURATION}$", re.IGNORECASE)
BEHIND = re.compile(rf"^(?:-\s*{DURATION}|{DURATION}(\s+ago)?)$", re.IGNORECASE)
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Looks(Enum):
    """Which way a flag's relative times point."""

    BACK = "back"  # a filter: 15m = 15 minutes ago
    AHEAD = "ahead"  # a due time: +15m = in 15 minutes


def parse_time(text: str | None, field: str, now: datetime | None = None,
               looks: Looks = Looks.AHEAD) -> datetime | None:
    """An aware datetime from ISO-8601 or a time relative to ``now``; None for None; ValidationError naming
    ``field`` (and saying what it takes) otherwise. Pure but for the clock when ``now`` is None."""
    if text is None:
        return None
    clean = text.strip()
    offset = _relative(clean, field, looks)
    if offset is not None:
        try:
            return (now or datetime.now(UTC)) + offset
        except OverflowError:
            raise ValidationError(f"{field}: {text!r} is further from now than any date", field) from None
    return _iso(clean, text, field, looks)


def since_us(text: str | None, field: str, now: datetime | None = None) -> int | None:
    """A filter's time (``--since``/``--until``) in µs since the epoch; None for None."""
    when = parse_time(text, field, now, Looks.BACK)
    return None if when is None else int(when.timestamp()) * 1_000_000 + when.microsecond


def _relative(clean: str, field: str, looks: Looks) -> timedelta | None:
    ahead, behind = AHEAD.match(clean), BEHIND.match(clean)
    if ahead:
        if looks is Looks.BACK:
            raise ValidationError(f"{field}: {clean!r} is in the future, and a filter looks back: "
                                  f"give {clean.lstrip('+').removeprefix('in').strip()} for that long ago", field)
        return _span(ahead.group(1), ahead.group(2))
    if behind:
        amount, unit = (behind.group(1), behind.group(2)) if behind.group(1) else (behind.group(3), behind.group(4))
        if looks is Looks.AHEAD and not clean.startswith("-") and not behind.group(5):
            raise ValidationError(f"{field}: {clean!r} could mean either way: give +{clean} (from now) "
                                  f"or {clean} ago", field)
        return -_span(amount, unit)
    return None


def _span(amount: str, unit: str) -> timedelta:
    try:
        return timedelta(seconds=float(amount) * UNIT_S[unit[0].lower()])
    except OverflowError:
        return timedelta.max


def _iso(clean: str, text: str, field: str, looks: Looks) -> datetime:
    try:
        when = datetime.fromisoformat(clean)
    except ValueError:
        examples = "15m, 2h, 1d (that long ago)" if looks is Looks.BACK else "+5m, in 2h (from now)"
        raise ValidationError(f"{field}: {text!r} is not a time: give {examples} or ISO-8601, "
                              "e.g. 2026-12-01T09:00:00Z", field) from None
    if when.tzinfo is not None:
        return when
    if looks is Looks.BACK:
        return when.replace(tzinfo=UTC)
    raise ValidationError(f"{field}: {text!r} has no time zone: give one, e.g. {clean}Z or {clean}+01:00", field)


def shown(us: int | None) -> str:
    """A time in µs as the CLI prints every time: ISO-8601 UTC to the millisecond (``2026-12-01T09:00:00.120Z``);
    the bare number when no date has it, ``-`` for None."""
    if us is None:
        return "-"
    try:
        return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return f"{us} µs"
