"""The rules a command must pass: one set for the client, the CLI and the engine's admission. Pure.

The engine admits a job only if every rule holds, so that what it admits can always run and
end: its ids make valid store keys (printable, bounded), its due time has a place in the ready
queue and the due-time index, its priority, lane and attempt count are ones the scheduler
knows. The client and the CLI run the same rules before producing, so a bad value fails at
the call; a producer in another language gets a ``JobRejected`` (or a ``CommandRefused``)
instead. Every rule raises :class:`~engine.errors.ValidationError` whose message starts with
the field's name and whose ``reason`` is the code the rejection carries. docs/contract.md
lists the rules for producers in other languages.

Times are integer microseconds since 1970-01-01 UTC, as on the wire; ``now`` is an argument.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from engine.contract import messages as m
from engine.errors import ValidationError

MAX_NAME_LENGTH = 200
"""Tenant ids, task types, schedule ids, label keys' bound: characters, not bytes."""
MAX_JOB_ID_LENGTH = 255
"""Job ids: a UUID is 36; ``schedule:<schedule_id>`` up to 209."""
MAX_KEY_LENGTH = 1000
"""Idempotency keys."""
MAX_TEXT_LENGTH = 1000
"""Text that goes into events: reasons, requested_by (any characters), label values (printable)."""
MAX_LABELS = 64
MAX_ATTEMPTS = 1000
MAX_CATCH_UP = 1000
"""A schedule's ``catch_up`` misfire policy fires at most this many missed occurrences."""
MAX_RESULT_BYTES = 512 * 1024
"""A handler's result, written into its JobSucceeded event: bigger ones dead-letter the job."""
MAX_AHEAD_US = 100 * 365 * 86_400 * 1_000_000
"""How far ahead a due time may be: 100 years of 365 days (about 3.15e15 µs)."""
MAX_PRIORITY = 9
SUBMIT_LANES = ("HIGH", "NORMAL", "LOW", "BATCH")
"""Lanes a job may ask for (any case); DEAD is the dead-letter queue, never asked for."""
SCOPES = ("tenant", "global")
PRODUCT_SCOPE = "product:"
CHILD_STATUSES = ("completed", "dead", "cancelled", "rejected")
MAX_DEPENDENCIES = 10_000
"""Jobs one job may wait for (``depends_on``)."""
MAX_DEPENDENCY_CHARACTERS = 400_000
"""The ids of one job's dependencies together (characters): with a payload at its bound, its JobSubmitted still
fits in one Kafka record (10,000 UUIDs are 360,000)."""
DEPENDENCY_POLICIES = ("cancel", "run")
"""What a job does when a dependency of it dies or is cancelled: cancel (the default) or run anyway."""
DEPENDENCY_STATUSES = ("completed", "dead", "cancelled", "partial", "unknown")
RESERVED_JOB_ID_PREFIX = "schedule:"
"""Job ids of this form are a schedule's envelope (engine.domain.schedules.envelope_id)."""
REASONS = {"tenant_id": "invalid_tenant", "payload": "invalid_payload"}
"""Rejection reasons that predate this module; every other field's is ``invalid_<field>``."""
_SHOWN = 60


def invalid(field: str, detail: str, reason: str | None = None) -> ValidationError:
    """The error for ``field``: message ``"<field>: <detail>"``, and the rejection reason code."""
    return ValidationError(f"{field}: {detail}", field, reason or REASONS.get(field))


def shown(value: object) -> str:
    """``repr(value)``, cut short enough for a message."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 5]}...{text[-2:]}"


# --- text -----------------------------------------------------------------------------------


def check_text(field: str, value: object, max_length: int = MAX_TEXT_LENGTH, *, empty: bool = False) -> str:
    """``value`` if it is printable text of at most ``max_length`` characters (empty only if allowed).

    Printable is Python's ``str.isprintable``: no control (Cc), format (Cf: RTL marks,
    zero-width joiners), surrogate, private-use or unassigned characters, no line or paragraph
    separators and no spaces but U+0020.
    """
    if not isinstance(value, str):
        raise invalid(field, f"must be a string, got {type(value).__name__}")
    if not value:
        if empty:
            return value
        raise invalid(field, "must not be empty")
    if len(value) > max_length:
        raise invalid(field, f"is {len(value)} characters long, at most {max_length} allowed")
    if not value.isprintable():
        raise invalid(field, _unprintable(value))
    return value


def _unprintable(value: str) -> str:
    at, char = next((i, c) for i, c in enumerate(value) if not c.isprintable())
    category = unicodedata.category(char)
    kind = "control character" if category == "Cc" else f"non-printable character (Unicode {category})"
    return f"contains {kind} {char!r} at {at}"


def check_free_text(field: str, value: object, max_length: int = MAX_TEXT_LENGTH) -> str:
    """``value`` if it is a string of at most ``max_length`` characters (reasons: any character)."""
    if not isinstance(value, str):
        raise invalid(field, f"must be a string, got {type(value).__name__}")
    if len(value) > max_length:
        raise invalid(field, f"is {len(value)} characters long, at most {max_length} allowed")
    return value


_KNOWN_NAMES: set[str] = set()
"""Names of at most MAX_NAME_LENGTH that passed check_name: tenants and task types repeat (a memo, at most
_KNOWN_LIMIT of them), so a bulk submit checks each once."""
_KNOWN_LIMIT = 10_000


def check_name(field: str, value: object, max_length: int = MAX_NAME_LENGTH) -> str:
    """``value`` if it is a usable name: printable text of 1..``max_length`` characters, no space at either end."""
    if type(value) is str and value in _KNOWN_NAMES and max_length >= MAX_NAME_LENGTH:
        return value
    text = check_text(field, value, max_length)
    if text[0] == " " or text[-1] == " ":
        raise invalid(field, f"must not start or end with a space, got {shown(text)}")
    if max_length == MAX_NAME_LENGTH and type(text) is str:  # not job ids: each is new
        if len(_KNOWN_NAMES) >= _KNOWN_LIMIT:
            _KNOWN_NAMES.clear()
        _KNOWN_NAMES.add(text)
    return text


def check_job_id(value: object, field: str = "job_id") -> str:
    """A job id: a name of up to 255 characters (a UUID is 36)."""
    return check_name(field, value, MAX_JOB_ID_LENGTH)


def check_tenant_id(value: object) -> str:
    """A tenant id: a name of up to 200 characters."""
    return check_name("tenant_id", value)


def check_task_type(value: object) -> str:
    """A task type: a name of up to 200 characters."""
    return check_name("task_type", value)


def check_idempotency_key(value: object) -> str | None:
    """None, or printable text of 1..1000 characters."""
    return None if value is None else check_text("idempotency_key", value, MAX_KEY_LENGTH)


# --- numbers and times ----------------------------------------------------------------------


def _integer(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, f"must be an integer, got {type(value).__name__}")
    return value


def check_run_at(value: object, now: int, field: str = "run_at") -> int | None:
    """None (now), or a due time in µs from 0 (1970) to ``now`` + 100 years; in the past means now."""
    if value is None:
        return None
    when = _integer(field, value)
    if when < 0:
        raise invalid(field, f"{iso_us(when)} is before 1970-01-01T00:00:00Z (0 µs); a time in the past means now, "
                             "but not before 1970")
    if when > now + MAX_AHEAD_US:
        raise invalid(field, f"{iso_us(when)} is more than 100 years ahead; the latest is {iso_us(now + MAX_AHEAD_US)}")
    return when


def iso_us(us: int) -> str:
    """A time in µs since 1970 for a message: ISO-8601 UTC and the number (just the number out of range)."""
    try:
        text = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)).isoformat()
    except OverflowError:
        return f"{us} µs"
    return f"{text.replace('+00:00', 'Z')} ({us} µs)"


def check_delay(value: object, field: str = "delay") -> float:
    """A delay in seconds: a finite number from 0 to 100 years."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(field, f"must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise invalid(field, f"must be a finite number of seconds >= 0, got {value!r}")
    if value * 1_000_000 > MAX_AHEAD_US:
        raise invalid(field, f"{value!r} s is more than 100 years")
    return float(value)


def check_priority(value: object) -> int:
    """A priority: an integer 0 (lowest) to 9 (highest)."""
    priority = _integer("priority", value)
    if not 0 <= priority <= MAX_PRIORITY:
        raise invalid("priority", f"must be 0-9, got {priority}")
    return priority


def check_max_attempts(value: object) -> int | None:
    """None (the task type's policy), or 1..1000 attempts."""
    if value is None:
        return None
    attempts = _integer("max_attempts", value)
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise invalid("max_attempts", f"must be 1-{MAX_ATTEMPTS}, got {attempts}")
    return attempts


# --- choices --------------------------------------------------------------------------------


def check_lane(value: object) -> str | None:
    """The lane asked for, upper-cased (HIGH, NORMAL, LOW, BATCH), or None (by priority) for None or ""."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise invalid("lane", f"must be a string, got {type(value).__name__}")
    lane = value.upper()
    if lane == "DEAD":
        raise invalid("lane", "DEAD is the dead-letter queue, not a lane to submit to")
    if lane not in SUBMIT_LANES:
        raise invalid("lane", f"unknown lane {shown(value)}; expected one of {', '.join(SUBMIT_LANES)}")
    return lane


def check_scope(value: object) -> str | None:
    """None or ``tenant`` (the job's tenant), ``global`` (every tenant), ``product:<name>``."""
    if value is None or value in SCOPES:
        return value
    if isinstance(value, str) and value.startswith(PRODUCT_SCOPE):
        try:
            check_name("product", value[len(PRODUCT_SCOPE):])
        except ValidationError as e:
            raise invalid("scope", f"product:<name> needs a valid name: {e}") from None
        return value
    raise invalid("scope", f"must be tenant, global or product:<name>, got {shown(value)}")


def check_labels(value: object) -> Mapping[str, str]:
    """At most 64 labels: names of up to 200 characters to printable text of up to 1000."""
    if type(value) is dict and not value:
        return value
    if not isinstance(value, Mapping):
        raise invalid("labels", f"must be a mapping of strings, got {type(value).__name__}")
    if len(value) > MAX_LABELS:
        raise invalid("labels", f"{len(value)} labels, at most {MAX_LABELS} allowed")
    for key, text in value.items():
        try:
            check_name("key", key)
            check_text("value", text, empty=True)
        except ValidationError as e:
            raise invalid("labels", f"label {shown(key)}: {e}") from None
    return value


def check_payload(value: object, max_bytes: int) -> m.Payload:
    """A payload of at most ``max_bytes`` bytes of data (the engine's ``max_payload_bytes``)."""
    if not isinstance(value, m.Payload) or not isinstance(value.data, bytes):
        raise invalid("payload", f"must be a Payload of bytes, got {type(value).__name__}")
    if len(value.data) > max_bytes:
        raise invalid("payload", f"is {len(value.data):,} bytes; the limit is {max_bytes:,} (max_payload_bytes)",
                      "payload_too_large")
    check_name("payload.content_type", value.content_type)
    check_text("payload.schema_name", value.schema_name, MAX_NAME_LENGTH, empty=True)
    _integer("payload.schema_version", value.schema_version)
    return value


# --- commands -------------------------------------------------------------------------------


def check_submit(command: m.Command, now: int, max_payload_bytes: int) -> m.SubmitJob:
    """The SubmitJob of ``command`` if every rule of admission holds (the task type's handler aside)."""
    body = command.body
    if not isinstance(body, m.SubmitJob):
        raise invalid("body", f"expected a SubmitJob, got {type(body).__name__}")
    check_job_id(command.job_id)
    if command.job_id.startswith(RESERVED_JOB_ID_PREFIX):
        raise invalid("job_id", f"the prefix {RESERVED_JOB_ID_PREFIX!r} is reserved for schedules")
    check_tenant_id(command.tenant_id)
    check_task_type(body.task_type)
    check_payload(body.payload, max_payload_bytes)
    check_priority(body.priority)
    if _has_options(body):
        _check_options(command, body, now)
    return body


def _has_options(body: m.SubmitJob) -> bool:
    """Whether any field that defaults to None (or no labels) is set: most bulk jobs set none."""
    return (body.run_at is not None or body.lane is not None or body.max_attempts is not None
            or body.scope is not None or body.parent_job_id is not None or body.idempotency_key is not None
            or type(body.labels) is not dict or bool(body.labels) or type(body.depends_on) is not dict
            or bool(body.depends_on))


def _check_options(command: m.Command, body: m.SubmitJob, now: int) -> None:
    check_run_at(body.run_at, now)
    check_lane(body.lane)
    check_max_attempts(body.max_attempts)
    check_labels(body.labels)
    check_scope(body.scope)
    if body.parent_job_id is not None:
        check_job_id(body.parent_job_id, "parent_job_id")
    check_depends_on(body.depends_on, command.job_id, body.scope)
    check_derived_id(command.job_id, command.tenant_id, check_idempotency_key(body.idempotency_key))


def check_depends_on(value: object, job_id: str = "", scope: str | None = None) -> Mapping[str, str]:
    """A job's dependencies: at most MAX_DEPENDENCIES job ids (MAX_DEPENDENCY_CHARACTERS together), not its own,
    each mapped to a policy of DEPENDENCY_POLICIES; a scoped job has none."""
    if not isinstance(value, Mapping):
        raise invalid("depends_on", f"must map job ids to cancel or run, got {type(value).__name__}")
    if not value:
        return value
    if len(value) > MAX_DEPENDENCIES:
        raise invalid("depends_on", f"{len(value):,} dependencies, at most {MAX_DEPENDENCIES:,} allowed")
    if scope not in (None, "tenant"):
        raise invalid("depends_on", f"a scoped job (scope {shown(scope)}) cannot wait for other jobs")
    size = 0
    for dependency, policy in value.items():
        check_job_id(dependency, "depends_on")
        size += len(dependency)
        if dependency == job_id:
            raise invalid("depends_on", f"job {shown(job_id)} cannot wait for itself")
        if policy not in DEPENDENCY_POLICIES:
            raise invalid("depends_on", f"if_dependency_fails must be cancel or run, got {shown(policy)}")
    if size > MAX_DEPENDENCY_CHARACTERS:
        raise invalid("depends_on", f"the dependencies' ids are {size:,} characters together, at most "
                                    f"{MAX_DEPENDENCY_CHARACTERS:,} allowed")
    return value


def check_derived_id(job_id: str, tenant: str, key: str | None) -> None:
    """A job with an idempotency key must carry the id derived from (tenant, key), or duplicates would not collide."""
    if key is None:
        return
    from engine.contract.ids import job_id_for_key  # ids.py itself validates with this module

    expected = job_id_for_key(tenant, key)
    if job_id != expected:
        raise invalid("job_id", f"a job with an idempotency key has the id derived from (tenant_id, "
                                f"idempotency_key): expected {expected}, got {shown(job_id)}")


def check_job_command(command: m.Command, now: int) -> m.CommandBody:
    """The body of a command about an existing job (cancel, replay, reschedule, reprioritize, a child's report)
    if valid.

    Its ``tenant_id`` may be empty (the caller need not know it); if given it must be valid. A
    child's report carries the child's tenant, held to no rule: a child rejected for its tenant (a
    bad one in the tenants table) must still be reported, or its parent would never settle.
    """
    check_job_id(command.job_id)
    body = command.body
    if command.tenant_id and not isinstance(body, m.ReportChild):
        check_tenant_id(command.tenant_id)
    if isinstance(body, (m.CancelJob, m.ReplayDeadJob)):
        check_free_text("reason", body.reason)
        check_free_text("requested_by", body.requested_by)
    elif isinstance(body, m.RescheduleJob):
        check_run_at(body.run_at, now)
        check_free_text("reason", body.reason)
    elif isinstance(body, m.ReprioritizeJob):
        check_priority(body.priority)
        check_free_text("reason", body.reason)
        check_free_text("requested_by", body.requested_by)
    elif isinstance(body, m.ReportChild):
        _check_report(body)
    elif isinstance(body, m.AwaitJob):
        check_job_id(body.dependent_job_id, "dependent_job_id")
    elif isinstance(body, m.ReportDependency):
        check_job_id(body.dependency_job_id, "dependency_job_id")
        if body.status not in DEPENDENCY_STATUSES:
            raise invalid("status", f"must be one of {', '.join(DEPENDENCY_STATUSES)}, got {shown(body.status)}")
    return body


def _check_report(body: m.ReportChild) -> None:
    check_job_id(body.child_job_id, "child_job_id")
    check_free_text("child_tenant", body.child_tenant, MAX_NAME_LENGTH * 4)
    if body.status not in CHILD_STATUSES:
        raise invalid("status", f"must be one of {', '.join(CHILD_STATUSES)}, got {shown(body.status)}")


def check_schedule_command(command: m.Command) -> m.CommandBody:
    """The body of a schedule command if its names are valid (UpsertSchedule's definition is checked by cron)."""
    if command.tenant_id:
        check_tenant_id(command.tenant_id)
    body = command.body
    check_name("schedule_id", getattr(body, "schedule_id", None))
    check_free_text("reason", getattr(body, "reason", ""))
    return body
