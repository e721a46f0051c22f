"""Recurring schedules: the record folded from their events, and what each command or due timer decides. Pure.

A schedule lives in the partition of its *envelope id* ``schedule:<schedule_id>`` (the
``job_id`` of its commands and events), so every command and event of one schedule is in
one partition and one owner decides for it. Its life, as events:

- ``ScheduleUpserted`` (definition) then ``ScheduleArmed(occurrence)``: the next
  occurrence, computed once here from the cron calendar and recorded, so a rebuild never
  recomputes it (a tzdata or croniter upgrade cannot move an armed occurrence).
- When the armed occurrence is due (a ``D:`` timer): ``ScheduleFired(occurrence, job_id)``
  plus a ``SubmitJob`` (``Send``) for the occurrence's job, whose id derives from
  (schedule, occurrence): a double firing collides in the job's partition. Occurrences the
  misfire policy drops are recorded as ``OccurrenceSkipped``.
- When that job reaches a final state, its owner sends ``ReportOccurrence``; the schedule
  then arms the next occurrence with ``cron.next_after_run`` (``ScheduleArmed`` after a
  firing also records that the fired occurrence finished). So at most one occurrence of a
  schedule is in flight, and a schedule advances only when work actually finished.
- ``SchedulePaused`` / ``ScheduleResumed`` / ``ScheduleRemoved``. A paused schedule never
  fires; resuming arms from the resume time (the paused stretch is not owed). Upserting a
  paused schedule again changes its definition and leaves it paused: only a resume undoes a pause.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from engine.contract import messages as m
from engine.domain.switch import type_switch
from engine.contract.ids import occurrence_job_id
from engine.contract.validation import check_payload, check_schedule_command, invalid, shown
from engine.domain.commands import Route, taking
from engine.domain.cron import Schedule, due_occurrences, next_after_run, next_occurrences
from engine.domain.decide import CommandInput, Emit, Send
from engine.errors import ValidationError

ENVELOPE_PREFIX = "schedule:"
SCHEDULE_COMMANDS = taking(Route.SCHEDULE)  # engine/domain/commands.py
SCHEDULE_EVENTS = (m.ScheduleUpserted, m.SchedulePaused, m.ScheduleResumed, m.ScheduleRemoved, m.ScheduleArmed,
                   m.ScheduleFired, m.OccurrenceSkipped)
LABEL_SCHEDULE, LABEL_OCCURRENCE = "schedule", "occurrence"


def envelope_id(schedule_id: str) -> str:
    """The ``job_id`` every command and event of a schedule carries: it picks the schedule's partition."""
    return ENVELOPE_PREFIX + schedule_id


def is_schedule_command(command: m.Command) -> bool:
    """Whether a command is about a schedule (its "job" is the schedule)."""
    return isinstance(command.body, SCHEDULE_COMMANDS)


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """One schedule as its events leave it: the source of truth for the schedule's decisions."""

    schedule_id: str
    tenant_id: str
    task_type: str
    cron: str
    timezone: str
    payload: m.Payload
    priority: int
    enabled: bool
    misfire_policy: str
    max_catch_up: int
    dst_policy: str
    created_at: int
    updated_at: int
    owed_from: int  # occurrences at or before this are never owed (upsert or resume time)
    armed: int | None = None  # the next occurrence to fire (the D: timer, while enabled)
    fired: int | None = None  # the occurrence fired whose run has not reported its end yet
    fired_at: int | None = None
    last_finished: int | None = None
    fired_count: int = 0
    skipped_count: int = 0
    last_skipped: int | None = None

    @property
    def fired_job_id(self) -> str | None:
        """The job id of the occurrence in flight, if any."""
        return None if self.fired is None else occurrence_job_id(self.schedule_id, self.fired)

    @property
    def last_job_id(self) -> str | None:
        """The job id of the last occurrence that finished, if any."""
        return None if self.last_finished is None else occurrence_job_id(self.schedule_id, self.last_finished)

    def definition(self, enabled: bool | None = None) -> Schedule:
        """The validated cron definition; ValidationError if it no longer is (e.g. a zone tzdata dropped)."""
        return Schedule(schedule_id=self.schedule_id, tenant_id=self.tenant_id, task_type=self.task_type,
                        cron=self.cron, timezone=self.timezone, payload=self.payload.data,
                        content_type=self.payload.content_type, priority=self.priority,
                        enabled=self.enabled if enabled is None else enabled,
                        misfire_policy=self.misfire_policy, max_catch_up=self.max_catch_up,  # type: ignore[arg-type]
                        dst_policy=self.dst_policy)  # type: ignore[arg-type]


# --- evolve ------------------------------------------------------------------------------


def evolve_schedule(view: ScheduleView | None, event: m.Event) -> ScheduleView | None:
    """The schedule after ``event`` (None: it does not exist). Never computes an occurrence."""
    return _evolve(event.body, view, event.occurred_at)


@type_switch
def _evolve(body: object, view: ScheduleView | None, at: int) -> ScheduleView | None:
    return view


@_evolve.register
def _(body: m.ScheduleUpserted, view: ScheduleView | None, at: int) -> ScheduleView | None:
    fields = dict(tenant_id=body.tenant_id, task_type=body.task_type, cron=body.cron, timezone=body.timezone,
                  payload=body.payload, priority=body.priority, enabled=body.enabled,
                  misfire_policy=body.misfire_policy, max_catch_up=body.max_catch_up, dst_policy=body.dst_policy,
                  updated_at=at, owed_from=at, armed=None)
    if view is None:
        return ScheduleView(schedule_id=body.schedule_id, created_at=at, **fields)  # type: ignore[arg-type]
    return replace(view, **fields)  # type: ignore[arg-type]


@_evolve.register
def _(body: m.SchedulePaused, view: ScheduleView | None, at: int) -> ScheduleView | None:
    return view and replace(view, enabled=False, armed=None, updated_at=at)


@_evolve.register
def _(body: m.ScheduleResumed, view: ScheduleView | None, at: int) -> ScheduleView | None:
    return view and replace(view, enabled=True, owed_from=at, armed=None, updated_at=at)


@_evolve.register
def _(body: m.ScheduleRemoved, view: ScheduleView | None, at: int) -> ScheduleView | None:
    return None


@_evolve.register
def _(body: m.ScheduleArmed, view: ScheduleView | None, at: int) -> ScheduleView | None:
    if view is None:
        return None
    if view.fired is not None:  # arming after a firing records that the fired run finished
        return replace(view, armed=body.occurrence_at, fired=None, fired_at=None, last_finished=view.fired)
    return replace(view, armed=body.occurrence_at)


@_evolve.register
def _(body: m.ScheduleFired, view: ScheduleView | None, at: int) -> ScheduleView | None:
    return view and replace(view, armed=None, fired=body.occurrence_at, fired_at=at,
                            fired_count=view.fired_count + 1)


@_evolve.register
def _(body: m.OccurrenceSkipped, view: ScheduleView | None, at: int) -> ScheduleView | None:
    if view is None:
        return None
    armed = None if view.armed == body.occurrence_at else view.armed
    return replace(view, armed=armed, skipped_count=view.skipped_count + 1, last_skipped=body.occurrence_at)


# --- decide ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleDue:
    """The schedule's armed occurrence has come (its ``D:`` timer fired)."""

    schedule_id: str


@dataclass(frozen=True, slots=True)
class ScheduleContext:
    """What schedule decisions depend on besides the schedule: the time and the known task types."""

    now: int
    tasks: Mapping[str, object] | None = None  # None: any task type
    max_payload_bytes: int = 512 * 1024


ScheduleInput = CommandInput | ScheduleDue


def decide_schedule(view: ScheduleView | None, given: ScheduleInput, ctx: ScheduleContext) -> list[Emit | Send]:
    """The events (and the occurrence job's SubmitJob) that ``given`` causes for the schedule."""
    if isinstance(given, ScheduleDue):
        return decide_due(view, ctx)
    cmd, body = given.command, given.command.body
    try:
        check_schedule_command(cmd)
    except ValidationError as e:
        return _refuse(cmd, type(body).__name__, view, str(e))
    sid = getattr(body, "schedule_id", "")
    if cmd.job_id != envelope_id(sid):  # else another partition's owner would decide for the schedule
        return _refuse(cmd, type(body).__name__, view, f"a schedule's commands carry job_id {envelope_id(sid)!r}, "
                       f"got {cmd.job_id!r}")
    return _command(body, cmd, view, ctx)


def _emit(view: ScheduleView, body: m.EventBody) -> Emit:
    return Emit(envelope_id(view.schedule_id), view.tenant_id, body)


def _refuse(cmd: m.Command, name: str, view: ScheduleView | None, reason: str) -> list[Emit | Send]:
    state = "unknown" if view is None else ("enabled" if view.enabled else "paused")
    return [Emit(cmd.job_id, cmd.tenant_id, m.CommandRefused(name, state, reason))]


@type_switch
def _command(body: object, cmd: m.Command, view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    return _refuse(cmd, type(body).__name__, view, "not a schedule command")


@_command.register
def _(body: m.UpsertSchedule, cmd: m.Command, view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    try:
        schedule = admit_schedule(body, ctx)
    except ValidationError as e:
        return _refuse(cmd, "UpsertSchedule", view, str(e))
    enabled = body.enabled and (view is None or view.enabled)  # a pause is undone by resume, not by a re-add
    upserted = m.ScheduleUpserted(body.schedule_id, body.tenant_id, body.task_type, body.cron, body.payload,
                                  body.timezone, schedule.priority, enabled, schedule.misfire_policy.value,
                                  body.max_catch_up, schedule.dst_policy.value)
    out: list[Emit | Send] = [Emit(cmd.job_id, body.tenant_id, upserted)]
    if enabled and (view is None or view.fired is None):
        out += _arm_after(schedule, body.tenant_id, ctx.now)
    return out


def admit_schedule(body: m.UpsertSchedule, ctx: ScheduleContext) -> Schedule:
    """The cron definition of an acceptable UpsertSchedule; ValidationError naming the field if not."""
    if ctx.tasks is not None and body.task_type not in ctx.tasks:
        raise invalid("task_type", f"no handler is registered for task type {shown(body.task_type)}",
                      "unknown_task_type")
    check_payload(body.payload, ctx.max_payload_bytes)
    return Schedule(schedule_id=body.schedule_id, tenant_id=body.tenant_id, task_type=body.task_type,
                    cron=body.cron, timezone=body.timezone, payload=body.payload.data,
                    content_type=body.payload.content_type, priority=body.priority, enabled=body.enabled,
                    misfire_policy=body.misfire_policy, max_catch_up=body.max_catch_up,  # type: ignore[arg-type]
                    dst_policy=body.dst_policy)  # type: ignore[arg-type]


def _arm_after(schedule: Schedule, tenant: str, now: int) -> list[Emit | Send]:
    upcoming = next_occurrences(schedule, now, 1)
    if not upcoming:
        return []
    return [Emit(envelope_id(schedule.schedule_id), tenant, m.ScheduleArmed(schedule.schedule_id, upcoming[0]))]


@_command.register
def _(body: m.PauseSchedule, cmd: m.Command, view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    if view is None or not view.enabled:
        return _refuse(cmd, "PauseSchedule", view, "no such schedule" if view is None else "already paused")
    return [_emit(view, m.SchedulePaused(view.schedule_id, body.reason))]


@_command.register
def _(body: m.ResumeSchedule, cmd: m.Command, view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    if view is None or view.enabled:
        return _refuse(cmd, "ResumeSchedule", view, "no such schedule" if view is None else "not paused")
    out: list[Emit | Send] = [_emit(view, m.ScheduleResumed(view.schedule_id, body.reason))]
    if view.fired is None:  # with a run in flight, its end arms the next occurrence
        try:
            out += _arm_after(view.definition(enabled=True), view.tenant_id, ctx.now)
        except ValidationError:
            pass
    return out


@_command.register
def _(body: m.RemoveSchedule, cmd: m.Command, view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    if view is None:
        return _refuse(cmd, "RemoveSchedule", view, "no such schedule")
    return [_emit(view, m.ScheduleRemoved(view.schedule_id, body.reason))]


@_command.register
def _(body: m.ReportOccurrence, cmd: m.Command, view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    if view is None:
        return _refuse(cmd, "ReportOccurrence", view, "no such schedule")
    if view.fired != body.occurrence_at:
        return []  # already accounted for: a repeated report (after a ping or a failover)
    try:
        schedule = view.definition(enabled=True)
    except ValidationError as e:
        return [_emit(view, m.ScheduleRemoved(view.schedule_id, f"invalid definition: {e}"))]
    upcoming = next_after_run(schedule, max(body.occurrence_at, view.owed_from), ctx.now)
    if upcoming is None:
        reason = f"the calendar has no occurrence after {iso(ctx.now)}"
        return [_emit(view, m.ScheduleRemoved(view.schedule_id, reason))]
    return [_emit(view, m.ScheduleArmed(view.schedule_id, upcoming))]


def decide_due(view: ScheduleView | None, ctx: ScheduleContext) -> list[Emit | Send]:
    """Fire the armed occurrence (or what the misfire policy owes instead); nothing if it is not due."""
    if view is None or not view.enabled or view.armed is None or view.fired is not None or view.armed > ctx.now:
        return []
    armed, sid = view.armed, view.schedule_id
    try:
        schedule = view.definition()
    except ValidationError as e:
        return [_emit(view, m.OccurrenceSkipped(sid, armed, f"invalid definition: {e}"))]
    owed = due_occurrences(schedule, max(armed - 1, view.owed_from), ctx.now)
    fire = owed[0] if owed else None
    out: list[Emit | Send] = []
    if fire != armed:
        out.append(_emit(view, m.OccurrenceSkipped(sid, armed, _misfire_reason(schedule, armed, fire, ctx.now))))
    if fire is None:
        return out + _arm_after(schedule, view.tenant_id, ctx.now)
    job_id = occurrence_job_id(sid, fire)
    out.append(_emit(view, m.ScheduleFired(sid, fire, job_id)))
    out.append(Send(occurrence_submit(view, fire, ctx.now)))
    return out


def _misfire_reason(schedule: Schedule, armed: int, fire: int | None, now: int) -> str:
    late = f"misfire ({schedule.misfire_policy.value}): due {iso(armed)}, seen at {iso(now)}"
    if fire is None:
        return f"{late}; later than the {schedule.misfire_grace_us // 1_000_000} s grace, nothing owed"
    return f"{late}; the occurrence of {iso(fire)} runs instead"


def occurrence_submit(view: ScheduleView, occurrence: int, now: int, attempt: int = 0) -> m.Command:
    """The SubmitJob of one occurrence: derived job id, due at the occurrence, labelled with both.

    ``attempt`` > 0 is a ping: the same job submitted again, answered by a refusal that makes
    the job's owner repeat its report if the run already ended (see engine/runtime/schedules.py).
    """
    job_id = occurrence_job_id(view.schedule_id, occurrence)
    labels = {LABEL_SCHEDULE: view.schedule_id, LABEL_OCCURRENCE: str(occurrence)}
    body = m.SubmitJob(view.task_type, view.payload, view.priority, run_at=occurrence, labels=labels)
    suffix = f":ping{attempt}" if attempt else ""
    return m.Command(f"{envelope_id(view.schedule_id)}:{occurrence}{suffix}", job_id, view.tenant_id, now, body,
                     envelope_id(view.schedule_id))


def occurrence_of(labels: Mapping[str, str]) -> tuple[str, int] | None:
    """(schedule id, occurrence) of a job submitted for a schedule, from its labels; None otherwise."""
    sid, occurrence = labels.get(LABEL_SCHEDULE), labels.get(LABEL_OCCURRENCE)
    if not sid or occurrence is None or not occurrence.lstrip("-").isdigit():
        return None
    return sid, int(occurrence)


def report_command(schedule_id: str, occurrence: int, job_id: str, tenant: str, status: str, now: int) -> m.Command:
    """The ReportOccurrence an occurrence job's owner sends to the schedule's partition."""
    body = m.ReportOccurrence(schedule_id, occurrence, job_id, status)
    return m.Command(f"report:{job_id}:{status}:{now}", envelope_id(schedule_id), tenant, now, body,
                     envelope_id(schedule_id))


def iso(us: int) -> str:
    """A UTC instant in microseconds as ISO-8601 (messages and CLI)."""
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
