"""How long each string field of each command may be: the first rule every command passes. Pure.

A command's text is copied into the events it causes (its ``command_id`` and
``correlation_id`` into every one of them, a reason into the event it records), so an
unbounded field multiplies in the log and in every store that folds it. Every string of
every command has a bound here, checked before anything else by the engine's admission, the
client and the CLI (the same table: docs/contract.md, *Bounds*). The finer rules (printable,
no space at either end, known values) are ``engine.contract.validation``'s; this module only
says how long. A field over its bound is a ``ValidationError`` naming the field and the
command (``correlation_id: is 716,800 characters long, at most 255 allowed in a SubmitJob``),
with the rejection reason ``invalid_<field>``.

Lengths count characters (code points), as the finer rules do.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import NamedTuple

from engine.contract import messages as m
from engine.contract.validation import (
    MAX_DEPENDENCIES,
    MAX_JOB_ID_LENGTH,
    MAX_KEY_LENGTH,
    MAX_LABELS,
    MAX_NAME_LENGTH,
    MAX_TEXT_LENGTH,
    PRODUCT_SCOPE,
    invalid,
)
from engine.errors import ValidationError

MAX_ID_LENGTH = MAX_JOB_ID_LENGTH
"""``command_id`` and ``correlation_id``: a UUID is 36; a trace id (W3C ``traceparent``) 55."""
MAX_CHOICE_LENGTH = 32
"""Fields that name one of a few values (a lane, a policy, a status)."""
MAX_CRON_LENGTH = 1000
MAX_TIMEZONE_LENGTH = 100
"""An IANA zone name: the longest is about 30 characters."""
MAX_CHILD_TENANT_LENGTH = MAX_NAME_LENGTH * 4
"""``ReportChild`` carries the child's tenant as it was (a bad one too): engines send it."""
MAX_CHILD_ERROR_LENGTH = 8000
"""``ReportChild.error``: the child's last error (type and message, each cut at 2,000) or rejection."""

ENVELOPE: tuple[tuple[str, int], ...] = (
    ("job_id", MAX_JOB_ID_LENGTH), ("command_id", MAX_ID_LENGTH), ("correlation_id", MAX_ID_LENGTH),
)
PAYLOAD: tuple[tuple[str, int], ...] = (("content_type", MAX_NAME_LENGTH), ("schema_name", MAX_NAME_LENGTH))
_REASONED = (("reason", MAX_TEXT_LENGTH), ("requested_by", MAX_TEXT_LENGTH))
_TASK = (("task_type", MAX_NAME_LENGTH), *_REASONED)
_SCHEDULE = (("schedule_id", MAX_NAME_LENGTH), ("reason", MAX_TEXT_LENGTH))
BODIES: dict[type, tuple[tuple[str, int], ...]] = {
    m.SubmitJob: (("task_type", MAX_NAME_LENGTH), ("idempotency_key", MAX_KEY_LENGTH),
                  ("lane", MAX_CHOICE_LENGTH), ("scope", len(PRODUCT_SCOPE) + MAX_NAME_LENGTH),
                  ("parent_job_id", MAX_JOB_ID_LENGTH), ("traceparent", MAX_ID_LENGTH)),
    m.CancelJob: _REASONED,
    m.ReplayDeadJob: _REASONED,
    m.ReprioritizeJob: _REASONED,
    m.RescheduleJob: (("reason", MAX_TEXT_LENGTH),),
    m.ReportChild: (("parent_job_id", MAX_JOB_ID_LENGTH), ("child_job_id", MAX_JOB_ID_LENGTH),
                    ("child_tenant", MAX_CHILD_TENANT_LENGTH), ("status", MAX_CHOICE_LENGTH),
                    ("error", MAX_CHILD_ERROR_LENGTH)),
    m.UpsertSchedule: (("schedule_id", MAX_NAME_LENGTH), ("tenant_id", MAX_NAME_LENGTH),
                       ("task_type", MAX_NAME_LENGTH), ("cron", MAX_CRON_LENGTH),
                       ("timezone", MAX_TIMEZONE_LENGTH), ("misfire_policy", MAX_CHOICE_LENGTH),
                       ("dst_policy", MAX_CHOICE_LENGTH)),
    m.PauseSchedule: _SCHEDULE,
    m.ResumeSchedule: _SCHEDULE,
    m.RemoveSchedule: _SCHEDULE,
    m.ReportOccurrence: (("schedule_id", MAX_NAME_LENGTH), ("job_id", MAX_JOB_ID_LENGTH),
                         ("status", MAX_CHOICE_LENGTH)),
    m.PauseTaskType: _TASK,
    m.ResumeTaskType: _TASK,
    m.SetRateLimit: _TASK,
    m.ClearRateLimit: _TASK,
    m.AwaitJob: (("dependent_job_id", MAX_JOB_ID_LENGTH),),
    m.ReportDependency: (("dependency_job_id", MAX_JOB_ID_LENGTH), ("status", MAX_CHOICE_LENGTH),
                         ("error", MAX_CHILD_ERROR_LENGTH)),
    m.ReportAttempt: (("outcome", MAX_CHOICE_LENGTH), ("error_type", MAX_TEXT_LENGTH),
                      ("message", MAX_CHILD_ERROR_LENGTH), ("traceback", MAX_CHILD_ERROR_LENGTH),
                      ("worker", MAX_NAME_LENGTH), ("pool", MAX_NAME_LENGTH)),
}
"""Each command body's string fields and their bounds (a payload's and labels' are checked apart)."""


def tenant_bound(body: object) -> int:
    """The bound on the envelope's ``tenant_id``: a name's, but a child's report carries the child's tenant."""
    kind = body if isinstance(body, type) else type(body)
    return MAX_CHILD_TENANT_LENGTH if kind is m.ReportChild else MAX_NAME_LENGTH


class _Plan(NamedTuple):
    """One command type's checks: every string's path from the envelope, its name in messages, and its bound."""

    values: Callable[[m.Command], tuple[object, ...]]
    fields: tuple[str, ...]
    bounds: tuple[int, ...]
    name: str


def _plan(body: type) -> _Plan:
    fields = [(f, b, f) for f, b in ENVELOPE] + [("tenant_id", tenant_bound(body), "tenant_id")]
    fields += [(f"body.{f}", b, f) for f, b in BODIES.get(body, ())]
    if "payload" in getattr(body, "__slots__", ()):
        fields += [(f"body.payload.{f}", b, f"payload.{f}") for f, b in PAYLOAD]
    return _Plan(operator.attrgetter(*(path for path, _, _ in fields)),
                 tuple(f for _, _, f in fields), tuple(b for _, b, _ in fields), body.__name__)


_PLANS = {body: _plan(body) for body in BODIES}


def check_bounds(command: m.Command) -> m.Command:
    """``command`` if no string of it is over its bound; else ValidationError naming the field and the command.

    One C call reads every string of the command (a few microseconds for a SubmitJob)."""
    body = command.body
    plan = _PLANS.get(type(body))
    if plan is None:
        return command  # not a command body: decide refuses it by name
    try:
        values = plan.values(command)
    except AttributeError:  # a payload that is no Payload (a caller's mistake): the finer rules name it
        return command
    for value, bound, field in zip(values, plan.bounds, plan.fields):
        if value.__class__ is str and len(value) > bound:
            _length(field, value, bound, plan.name)
    labels = getattr(body, "labels", None)
    if labels:
        _labels(labels, plan.name)
    depends_on = getattr(body, "depends_on", None)
    if depends_on:
        _dependencies(depends_on, plan.name)
    return command


def _length(field: str, value: object, bound: int, command: str) -> None:
    if isinstance(value, str) and len(value) > bound:  # anything else: the finer rules name its type
        raise invalid(field, f"is {len(value):,} characters long, at most {bound:,} allowed in a {command}")


def _labels(labels: object, command: str) -> None:
    if not isinstance(labels, Mapping):
        return  # not a mapping: the finer rule (check_labels) says so
    if len(labels) > MAX_LABELS:
        raise invalid("labels", f"{len(labels)} labels, at most {MAX_LABELS} allowed in a {command}")
    for key, value in labels.items():
        try:
            _length("key", key, MAX_NAME_LENGTH, command)
            _length("value", value, MAX_TEXT_LENGTH, command)
        except ValidationError as e:
            raise invalid("labels", f"label {str(key)[:40]!r}: {e}") from None



def _dependencies(depends_on: object, command: str) -> None:
    if not isinstance(depends_on, Mapping):
        return  # not a mapping: the finer rule (check_depends_on) says so
    if len(depends_on) > MAX_DEPENDENCIES:
        raise invalid("depends_on", f"{len(depends_on):,} dependencies, at most {MAX_DEPENDENCIES:,} allowed in a "
                                    f"{command}")
    for dependency, policy in depends_on.items():
        try:
            _length("job id", dependency, MAX_JOB_ID_LENGTH, command)
            _length("if_dependency_fails", policy, MAX_CHOICE_LENGTH, command)
        except ValidationError as e:
            raise invalid("depends_on", f"dependency {str(dependency)[:40]!r}: {e}") from None
