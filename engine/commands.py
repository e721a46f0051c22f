"""Building commands on the client side: envelopes, due times and payloads from what a caller passes.

Every value is checked with the rules of :mod:`engine.contract.validation`, the ones the engine
admits by, so a bad value fails here with a ``ValidationError`` naming the field.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.clock import now_us as now_us  # where the client and the tests have taken it
from engine.contract import messages as m
from engine.contract.bounds import check_bounds
from engine.contract.ids import job_id_for_key
from engine.contract.validation import DEPENDENCY_POLICIES, check_delay, check_run_at, check_submit, invalid
from engine.domain.cron import Schedule
from engine.domain.lanes import parse_priority
from engine.errors import ValidationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False)
# what JSONEncoder.encode builds per call (typeshed does not declare the C encoder)
_C_JSON = json.encoder.c_make_encoder and json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, _JSON.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)


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


def submit_command(job_id: str, command_id: str, now: int, task_type: str, payload: Any, tenant: str,
                   priority: int | str = 5, run_at: datetime | float | None = None, delay: float | None = None,
                   idempotency_key: str | None = None, lane: str | None = None, max_attempts: int | None = None,
                   correlation_id: str | None = None, scope: str | None = None,
                   labels: Mapping[str, str] | None = None, *, max_payload_bytes: int,
                   depends_on: Iterable[Any] | None = None, if_dependency_fails: str = "cancel",
                   traceparent: str | None = None) -> m.Command:
    """A checked SubmitJob issued at ``now``: the engine's admission rules, before anything is sent
    (``Client.submit`` and ``engine.testing.TestEngine.submit`` both build theirs here)."""
    if idempotency_key is not None:
        job_id = job_id_for_key(tenant, idempotency_key)
    body = m.SubmitJob(task_type, encode_payload(payload), parse_priority(priority), due_us(run_at, delay, now),
                       idempotency_key, lane, max_attempts, _labels(labels), scope,
                       depends_on=dependencies(depends_on, if_dependency_fails), traceparent=traceparent)
    command = m.Command(command_id, job_id, tenant, now, body, correlation_id)
    check_submit(check_bounds(command), now, max_payload_bytes)
    return command


def dependencies(depends_on: Iterable[Any] | None, if_dependency_fails: str = "cancel") -> dict[str, str]:
    """``depends_on`` (job ids or handles, in order, each once) as the SubmitJob's map of id to policy."""
    if if_dependency_fails not in DEPENDENCY_POLICIES:
        raise ValidationError(f"if_dependency_fails: must be cancel or run, got {if_dependency_fails!r}",
                              "if_dependency_fails", "invalid_if_dependency_fails")
    if depends_on is None:
        return {}
    if isinstance(depends_on, (str, bytes)) or not isinstance(depends_on, Iterable):
        raise ValidationError(f"depends_on: must be a list of job ids, got {type(depends_on).__name__}",
                              "depends_on", "invalid_depends_on")
    return {getattr(d, "job_id", d): if_dependency_fails for d in depends_on}


def dependency_waves(commands: list[m.Command]) -> list[list[m.Command]]:
    """``commands`` in waves: a SubmitJob that depends on a job of the same batch comes in a wave after it, so
    its dependency's SubmitJob is in the log (acknowledged) before the engine asks for it."""
    left = {c.job_id: c for c in commands}
    waves: list[list[m.Command]] = []
    while left:
        wave = [c for c in left.values() if not isinstance(c.body, m.SubmitJob)
                or not any(d in left and d != c.job_id for d in c.body.depends_on)]
        if not wave:
            raise ValidationError(f"depends_on: the jobs {', '.join(sorted(left)[:5])} wait for each other in a "
                                  "cycle", "depends_on", "invalid_depends_on")
        waves.append(wave)
        for c in wave:
            del left[c.job_id]
    return waves


def _labels(labels: object) -> Any:
    """A copy of a mapping of labels ({} for None); anything else as it is, for check_labels to name."""
    if labels is None:
        return {}
    return dict(labels) if isinstance(labels, Mapping) else labels


def upsert_schedule(schedule_id: str, task_type: str, cron: str, tenant: str, payload: Any = None,
                    timezone: str = "UTC", priority: int | str = 5, enabled: bool = True,
                    misfire_policy: str = "skip", max_catch_up: int = 10,
                    dst_policy: str = "first") -> m.UpsertSchedule:
    """A checked UpsertSchedule (``ValidationError`` naming the field): what ``add_schedule`` sends."""
    data = encode_payload(payload)
    schedule = Schedule(schedule_id=schedule_id, tenant_id=tenant, task_type=task_type, cron=cron,
                        timezone=timezone, payload=data.data, content_type=data.content_type,
                        priority=parse_priority(priority), enabled=enabled,
                        misfire_policy=misfire_policy, max_catch_up=max_catch_up,  # type: ignore[arg-type]
                        dst_policy=dst_policy)  # type: ignore[arg-type]
    return m.UpsertSchedule(schedule_id, tenant, task_type, cron, data, timezone, schedule.priority, enabled,
                            schedule.misfire_policy.value, max_catch_up, schedule.dst_policy.value)


@dataclass
class Receipt:
    """What the owner decided about one command (schedule or reschedule): accepted, refused, or not seen in time."""

    subject: str  # the schedule id, or the job id of a reschedule
    command_id: str
    status: str = "sent"  # sent (not waited for / not decided in time) | accepted | refused
    reason: str = ""
    armed: int | None = None  # the occurrence a schedule decision armed, or a reschedule's new due time (µs, UTC)
    paused: bool = False  # an upsert left (or made) the schedule paused
    events: list[m.Event] = field(default_factory=list)

    @property
    def schedule_id(self) -> str:
        """The subject of a schedule command."""
        return self.subject

    @property
    def accepted(self) -> bool:
        """Whether the owner applied the command."""
        return self.status == "accepted"

    def take(self, event: m.Event) -> None:
        """Take one event the command caused into account."""
        self.events.append(event)
        body = event.body
        if isinstance(body, m.CommandRefused):
            self.status, self.reason = "refused", body.reason
            return
        self.status = "accepted"
        if isinstance(body, m.ScheduleArmed):
            self.armed = body.occurrence_at
        elif isinstance(body, m.ScheduleUpserted):
            self.paused = not body.enabled
        elif isinstance(body, m.JobRescheduled):
            self.armed = body.due_at
