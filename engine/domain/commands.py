"""Which commands exist, and where each goes: the source of truth for routing a command. Pure.

Every command body of ``engine.contract.messages`` has one row: the *route* says what the
command's envelope id names and what decides it in the owner's partition, the *sender* says who
may send it. The owner's admission (``engine.runtime.loop.admit``) hands a command to the
handler of its route; the client checks a command by its route before producing it; the
signature rules (``engine.domain.authority``, ``engine.runtime.signatures``) read the senders.
A command type missing here is a bug the unit tests name.

======================  ==========  ========  ==========================================
command                 route       sender    decided by
======================  ==========  ========  ==========================================
SubmitJob, CancelJob,   job         service   ``engine.domain.decide`` for the job it names
ReplayDeadJob,
RescheduleJob,
ReprioritizeJob
ReportChild             job         engine    (a child's end, to its scoped parent)
ReportAttempt           job         service   (a remote worker's result, fenced by its token)
UpsertSchedule,         schedule    service   ``engine.domain.schedules`` for the schedule
PauseSchedule,
ResumeSchedule,
RemoveSchedule
ReportOccurrence        schedule    engine    (an occurrence's end, to its schedule)
PauseTaskType,          task_type   operator  ``engine.domain.tasktypes`` for the task type in
ResumeTaskType,                               each partition (one command per partition)
SetRateLimit,
ClearRateLimit
======================  ==========  ========  ==========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from engine.contract import messages as m


class Route(StrEnum):
    """What a command's envelope names, and so what decides it."""

    JOB = "job"
    SCHEDULE = "schedule"
    TASK_TYPE = "task_type"  # a task type as a whole, in one partition: a pause or a rate limit


class Sender(StrEnum):
    """Who may send a command."""

    SERVICE = "service"  # any service; a tenant's key acts for its tenant only (engine.domain.authority)
    OPERATOR = "operator"  # it holds or throttles every tenant's jobs of a task type: an operator's key
    ENGINE = "engine"  # engines only: reports between partitions


@dataclass(frozen=True, slots=True)
class Kind:
    """One command type's row: its route and its sender."""

    route: Route
    sender: Sender


_JOB, _SCHEDULE = Kind(Route.JOB, Sender.SERVICE), Kind(Route.SCHEDULE, Sender.SERVICE)
_TASK_TYPE = Kind(Route.TASK_TYPE, Sender.OPERATOR)

COMMANDS: dict[type, Kind] = {
    m.SubmitJob: _JOB,
    m.CancelJob: _JOB,
    m.ReplayDeadJob: _JOB,
    m.RescheduleJob: _JOB,
    m.ReprioritizeJob: _JOB,
    m.ReportChild: Kind(Route.JOB, Sender.ENGINE),
    m.AwaitJob: Kind(Route.JOB, Sender.ENGINE),
    m.ReportDependency: Kind(Route.JOB, Sender.ENGINE),
    m.ReportAttempt: Kind(Route.JOB, Sender.SERVICE),  # a remote worker's result (docs/workers.md)
    m.UpsertSchedule: _SCHEDULE,
    m.PauseSchedule: _SCHEDULE,
    m.ResumeSchedule: _SCHEDULE,
    m.RemoveSchedule: _SCHEDULE,
    m.ReportOccurrence: Kind(Route.SCHEDULE, Sender.ENGINE),
    m.PauseTaskType: _TASK_TYPE,
    m.ResumeTaskType: _TASK_TYPE,
    m.SetRateLimit: _TASK_TYPE,
    m.ClearRateLimit: _TASK_TYPE,
}
"""Every command body type, by its row."""


def route_of(command: m.Command) -> Route:
    """Where ``command`` goes."""
    return COMMANDS[type(command.body)].route


def taking(route: Route) -> tuple[type, ...]:
    """The command types that take ``route``."""
    return tuple(t for t, kind in COMMANDS.items() if kind.route is route)


def sent_by(sender: Sender) -> tuple[type, ...]:
    """The command types ``sender`` sends."""
    return tuple(t for t, kind in COMMANDS.items() if kind.sender is sender)
