"""Job, event and command ids, and the rules for the names that go into them.

A job id is a UUID string. A job submitted with an idempotency key, and a schedule's occurrence,
get an id derived with UUIDv5 from what identifies them, so a duplicate lands in the same
partition and collides with the first. The derivations are part of the contract
(docs/contract.md): producers in other languages compute the same ids.
"""

from __future__ import annotations

import os
import uuid

from engine.contract.validation import (
    MAX_NAME_LENGTH, check_idempotency_key, check_name, check_task_type, check_tenant_id,
)
from engine.errors import ValidationError

__all__ = ["MAX_NAME_LENGTH", "validate_name", "validate_tenant_id", "validate_task_type", "new_job_id",
           "new_event_id", "new_command_id", "new_uuid4s", "job_id_for_key", "occurrence_job_id", "child_job_id"]

IDEMPOTENCY_KEY_NAMESPACE = uuid.UUID("33239a05-2e46-529a-8c90-8d0c79cf9062")
"""uuid5(NAMESPACE_URL, "urn:epochq:job-id:idempotency-key"): ids derived from (tenant, key)."""

CHILD_NAMESPACE = uuid.UUID("2fb1559a-788d-519e-8541-9aed9d6a20fb")
"""uuid5(NAMESPACE_URL, "urn:epochq:job-id:scoped-child"): ids of a scoped job's per-tenant children."""

DEPENDENCY_NAMESPACE = uuid.UUID("77b5362e-fd01-5779-a19f-506c5603f7c9")
"""uuid5(NAMESPACE_URL, "urn:epochq:command-id:dependency"): ids of the commands that carry a dependency."""
OCCURRENCE_NAMESPACE = uuid.UUID("08971b83-4068-573d-86b7-08cdd9c71105")
"""uuid5(NAMESPACE_URL, "urn:epochq:job-id:schedule-occurrence"): ids of a schedule's runs."""

SEPARATOR = "\x1f"
"""Joins the parts of a derived id's name; names may not contain it (only printable characters)."""


validate_name = check_name
"""``value`` if it is a usable name: the rule is :func:`engine.contract.validation.check_name`."""
validate_tenant_id = check_tenant_id
validate_task_type = check_task_type


def new_job_id() -> str:
    """A fresh job id (random UUID) for a job submitted without an idempotency key."""
    return str(uuid.uuid4())


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_uuid4s(count: int) -> list[str]:
    """``count`` fresh random UUID strings (version 4) from one ``os.urandom`` call: 1 µs each, not 6."""
    raw = os.urandom(16 * count).hex()
    return [f"{raw[i:i + 8]}-{raw[i + 8:i + 12]}-4{raw[i + 13:i + 16]}-{_VARIANT[raw[i + 16]]}{raw[i + 17:i + 20]}-"
            f"{raw[i + 20:i + 32]}" for i in range(0, 32 * count, 32)]


def new_event_id() -> str:
    """A fresh event id (random UUID)."""
    return str(uuid.uuid4())


def new_command_id() -> str:
    """A fresh command id (random UUID)."""
    return str(uuid.uuid4())


def job_id_for_key(tenant: str, idempotency_key: str) -> str:
    """The job id of (tenant, idempotency key): uuid5(IDEMPOTENCY_KEY_NAMESPACE, tenant US key)."""
    validate_tenant_id(tenant)
    if check_idempotency_key(idempotency_key) is None:
        raise ValidationError("idempotency_key: must be a non-empty string", "idempotency_key")
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


def dependency_command_id(kind: str, dependent: str, dependency: str) -> str:
    """The command id of an ``AwaitJob`` or ``ReportDependency`` between two jobs: uuid5(DEPENDENCY_NAMESPACE,
    kind US dependent US dependency), short whatever the ids' lengths."""
    return str(uuid.uuid5(DEPENDENCY_NAMESPACE, kind + SEPARATOR + dependent + SEPARATOR + dependency))
