"""How the engine's log lines look: one line per record, naming the job it concerns.

Text: ``2024-05-01T12:00:00.123Z INFO epochq.work message job_id=… tenant=… epoch=3 partition=0``.
JSON: one object per line with ``time``, ``level``, ``logger``, ``message`` and the same fields.
The fields come from the record's ``extra=`` — :func:`job_extra` for the engine's own lines,
``JobContext.logger`` (:mod:`engine.runtime.execution.context`) for handler lines.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from engine.contract import messages as m
from engine.domain.jobs import JobView
from engine.errors import ConfigError

__all__ = ["FIELDS", "KeyValueFormatter", "JsonFormatter", "configure_logging", "job_extra"]

FIELDS = ("job_id", "tenant", "epoch", "partition", "attempt", "task_type")
FORMATS = ("text", "json")
_MARK = "_epochq_handler"


def _time(record: logging.LogRecord) -> str:
    """The record's time in UTC, ISO 8601 with milliseconds."""
    at = datetime.fromtimestamp(record.created, tz=UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fields(record: logging.LogRecord) -> list[tuple[str, Any]]:
    """The job fields the record carries (from ``extra=``), in :data:`FIELDS` order."""
    found = ((name, getattr(record, name, None)) for name in FIELDS)
    return [(name, value) for name, value in found if value is not None]


def _text(value: Any) -> str:
    """A value as ``key=value`` shows it: quoted only when it has spaces, quotes or ``=``."""
    text = str(value)
    if not text or any(c in text for c in ' "=\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


class KeyValueFormatter(logging.Formatter):
    """``time level logger message`` followed by `` key=value`` for each job field present."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """UTC, ISO 8601, milliseconds."""
        return _time(record)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        """The line before any traceback: the fields go right after the message."""
        tail = "".join(f" {name}={_text(value)}" for name, value in _fields(record))
        return super().formatMessage(record) + tail


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the job fields, and ``exc`` if any."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a single-line JSON object."""
        doc: dict[str, Any] = {"time": _time(record), "level": record.levelname, "logger": record.name,
                               "message": record.getMessage()}
        doc.update((name, v if isinstance(v, (int, float, bool, str)) else str(v)) for name, v in _fields(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, ensure_ascii=False)


def configure_logging(level: str, fmt: str = "text") -> None:
    """Send every log record to stderr in ``fmt`` ("text" or "json") at ``level`` (e.g. "INFO").

    Calling it again replaces the handler it installed before; other handlers stay.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--log-format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ConfigError(f"--log-level: expected DEBUG, INFO, WARNING, ERROR or CRITICAL, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    setattr(handler, _MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric)


def job_extra(event_or_job: m.Event | JobView | Any, partition: int) -> dict[str, Any]:
    """The ``extra=`` of an engine log line about a job: job_id, tenant, epoch, partition, …

    From an event: its job, tenant and epoch, plus the attempt and task type its body names.
    From a job record: its job, tenant, epoch (of its last event), attempt and task type.
    From anything else with those attributes (``RunRequest``, ``JobContext``): them.
    Fields without a value are left out.
    """
    subject = event_or_job
    if isinstance(subject, m.Event):
        body = subject.body
        found = {"job_id": subject.job_id, "tenant": subject.tenant_id, "epoch": subject.epoch,
                 "attempt": getattr(body, "attempt", None), "task_type": getattr(body, "task_type", None)}
    elif isinstance(subject, JobView):
        found = {"job_id": subject.job_id, "tenant": subject.tenant_id, "epoch": subject.epoch,
                 "attempt": subject.attempt, "task_type": subject.task_type}
    else:
        found = {name: getattr(subject, name, None) for name in FIELDS}
    found["partition"] = partition
    return {name: found[name] for name in FIELDS if found.get(name) is not None}
