"""Job, event and command ids, and the rules for the names that go into them.

A job id is a UUID string. A job submitted with an idempotency key, and a schedule's occurrence,
get an id derived with UUIDv5 from what identifies them, so a duplicate lands in the same
partition and collides with the first. The derivations are part of the contract
(docs/contract.md): producers in other languages compute the same ids.
"""

from __future__ import annotations

import re
import uuid

from engine.errors import ValidationError

IDEMPOTENCY_KEY_NAMESPACE = uuid.UUID("33239a05-2e46-529a-8c90-8d0c79cf9062")
"""uuid5(NAMESPACE_URL, "urn:epochq:job-id:idempotency-key"): ids derived from (tenant, key)."""

CHILD_NAMESPACE = uuid.UUID("2fb1559a-788d-519e-8541-9aed9d6a20fb")
"""uuid5(NAMESPACE_URL, "urn:epochq:job-id:scoped-child"): ids of a scoped job's per-tenant children."""

OCCURRENCE_NAMESPACE = uuid.UUID("08971b83-4068-573d-86b7-08cdd9c71105")
"""uuid5(NAMESPACE_URL, "urn:epochq:job-id:schedule-occurrence"): ids of a schedule's runs."""

SEPARATOR = "\x1f"
"""Joins the parts of a derived id's name; names may not contain it (no control characters)."""

MAX_NAME_LENGTH = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def validate_name(field: str, value: object) -> str:
    """``value`` if it is a usable name (non-empty str, <= 200 chars, no control chars)."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, got {type(value).__name__}")
    if not value:
        raise ValidationError(f"{field} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise ValidationError(f"{field} is {len(value)} characters long, at most {MAX_NAME_LENGTH} allowed")
    control = _CONTROL.search(value)
    if control:
        raise ValidationError(f"{field} contains control character {control.group()!r} at {control.start()}")
    return value


def validate_tenant_id(value: object) -> str:
    """The tenant id, if valid; ValidationError naming ``tenant_id`` otherwise."""
    return validate_name("tenant_id", value)


def validate_task_type(value: object) -> str:
    """The task type, if valid; ValidationError naming ``task_type`` otherwise."""
    return validate_name("task_type", value)


def new_job_id() -> str:
    """A fresh job id (random UUID) for a job submitted without an idempotency key."""
    return str(uuid.uuid4())


def new_event_id() -> str:
    """A fresh event id (random UUID)."""
    return str(uuid.uuid4())


def new_command_id() -> str:
    """A fresh command id (random UUID)."""
    return str(uuid.uuid4())


def job_id_for_key(tenant: str, idempotency_key: str) -> str:
    """The job id of (tenant, idempotency key): uuid5(IDEMPOTENCY_KEY_NAMESPACE, tenant US key)."""
    validate_tenant_id(tenant)
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise ValidationError("idempotency_key must be a non-empty string")
    return str(uuid.uuid5(IDEMPOTENCY_KEY_NAMESPACE, tenant + SEPARATOR + idempotency_key))


def occurrence_job_id(schedule_id: str, occurrence_us: int) -> str:
    """The job id of one run of a schedule: uuid5(OCCURRENCE_NAMESPACE, schedule US decimal micros)."""
    validate_name("schedule_id", schedule_id)
    if not isinstance(occurrence_us, int) or isinstance(occurrence_us, bool):
        raise ValidationError(f"occurrence_us must be an int (microseconds), got {type(occurrence_us).__name__}")
    return str(uuid.uuid5(OCCURRENCE_NAMESPACE, schedule_id + SEPARATOR + str(occurrence_us)))


def child_job_id(parent_job_id: str, tenant: str) -> str:
    """The job id of a scoped job's child for ``tenant``: uuid5(CHILD_NAMESPACE, parent US tenant)."""
    return str(uuid.uuid5(CHILD_NAMESPACE, parent_job_id + SEPARATOR + tenant))
