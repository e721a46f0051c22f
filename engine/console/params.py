"""Reading a page's query parameters and form fields: times, filters, numbers. ValidationError names the field."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from urllib.parse import quote, unquote

from engine.errors import ValidationError
from engine.questions.jobs import JobFilter
from engine.questions.deadletters import DeadQuery
from engine.questions.stores import DeadFilter

AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h|d)$", re.IGNORECASE)
UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def time_us(text: str | None, field: str, now_s: float | None = None) -> int | None:
    """A time in µs from ``15m``, ``2h``, ``1d`` (that long ago) or ISO-8601 (UTC without a zone); None if empty."""
    text = (text or "").strip()
    if not text:
        return None
    ago = AGO.match(text)
    if ago:
        now = time.time() if now_s is None else now_s
        return int((now - float(ago.group(1)) * UNIT_S[ago.group(2).lower()]) * 1_000_000)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"{field}: {text!r} is not a time: give 15m, 2h, 1d (that long ago) "
                              "or ISO-8601, e.g. 2026-12-01T09:00:00Z", field) from None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1_000_000)


def text(query: Mapping[str, str], name: str) -> str | None:
    """A parameter's text, stripped; None when absent or empty."""
    value = (query.get(name) or "").strip()
    return value or None


def labels(raw: str | None) -> tuple[tuple[str, str], ...]:
    """``k=v,k2=v2`` as label pairs; ValidationError for a pair without ``=``."""
    pairs = []
    for part in (raw or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ValidationError(f"label: {part.strip()!r} is not key=value", "label")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def job_filter(query: Mapping[str, str]) -> JobFilter:
    """The jobs search's filter from its parameters (status, tenant, type, since, until, label)."""
    return JobFilter(text(query, "status"), text(query, "tenant"), text(query, "type"),
                     time_us(text(query, "since"), "since"), time_us(text(query, "until"), "until"),
                     labels(text(query, "label")))


def dead_filter(query: Mapping[str, str]) -> DeadFilter:
    """The dead-letter filter from its parameters (type, tenant, since, until: the time each job died)."""
    return DeadFilter(text(query, "type"), text(query, "tenant"), time_us(text(query, "since"), "since"),
                      time_us(text(query, "until"), "until"))


def dead_query(query: Mapping[str, str]) -> DeadQuery:
    """The dead-letter filter and error group (``error``) from a page's parameters or a form's fields."""
    return DeadQuery(dead_filter(query), text(query, "error"))


def limit(query: Mapping[str, str], default: int, most: int) -> int:
    """The page size asked for (``limit``), between 1 and ``most``."""
    value = positive(query.get("limit"), "limit", default)
    if value != int(value) or value > most:
        raise ValidationError(f"limit: give a whole number from 1 to {most}", "limit")
    return int(value)


def positive(raw: str | None, field: str, default: float) -> float:
    """A number > 0 from a field; ValidationError naming it otherwise."""
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError(f"{field}: {raw!r} is not a number", field) from None
    if not value > 0 or value == float("inf"):
        raise ValidationError(f"{field}: must be a number > 0, got {raw}", field)
    return value


def segment(value: object) -> str:
    """``value`` as one URL path segment: every reserved character encoded, ``/`` too.

    A job id may hold ``/``: kept as is, ``y/../x`` in a link or a form's action would be
    normalised by the browser into the path of job ``x``; encoded, it stays one segment."""
    return quote(str(value), safe="")


def path_ids(raw_path: bytes, shape: tuple[str | None, ...]) -> list[str]:
    """The ids in a request's raw (still encoded) path, one per ``None`` of ``shape``, the fixed segments checked.

    ``/actions/jobs/<id>/cancel`` has the shape ``("actions", "jobs", None, "cancel")``. The path is
    split before it is decoded, so an id is exactly one encoded segment (``y%2F..%2Fx`` is the job
    ``y/../x``); a path of another shape (an id whose ``/`` was sent unencoded, dot segments) names no
    id: ValidationError, and nothing is acted on."""
    parts = raw_path.split(b"?", 1)[0].decode("latin-1").split("/")[1:]
    if len(parts) != len(shape) or any(want is not None and got != want for got, want in zip(parts, shape)):
        raise ValidationError(f"path: {raw_path.decode('latin-1')!r} does not name one id per segment "
                              "(encode / in an id as %2F)", "path")
    try:
        ids = [unquote(got, errors="strict") for got, want in zip(parts, shape) if want is None]
    except UnicodeDecodeError:
        raise ValidationError("path: an id is not UTF-8 once decoded", "path") from None
    if any(not i or i in (".", "..") for i in ids):
        raise ValidationError("path: an empty or dot segment names no id", "path")
    return ids
