"""The client's schedule and reschedule methods (mixed into ``engine.client.Client``).

A schedule command goes to ``<ns>.commands`` with ``job_id = "schedule:<schedule_id>"``, so
it lands in the schedule's partition; the methods wait (by default) until the owner's
decision is in the log and return it as a :class:`Receipt`.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine.commands import Receipt as Receipt  # re-exported: its home before engine.testing shared it
from engine.commands import due_us, new_command, upsert_schedule
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.domain.schedules import ScheduleView, envelope_id
from engine.errors import ValidationError
from engine.runtime.kafka.ports import topic_reader

if TYPE_CHECKING:
    from engine.client import JobHandle
    from engine.config import Settings


class ScheduleMethods:
    """Schedules (add, pause, resume, remove, list, show) and reschedule, for ``Client``."""

    settings: Settings

    def _send(self, commands: list[m.Command]) -> list[JobHandle]:  # provided by Client
        raise NotImplementedError

    def tenant_of(self, job_id: str, command: str = "command") -> str:  # provided by Client
        raise NotImplementedError

    def add_schedule(self, schedule_id: str, task_type: str, cron: str, *, tenant: str, payload: Any = None,
                     timezone: str = "UTC", priority: int | str = 5, enabled: bool = True,
                     misfire_policy: str = "skip", max_catch_up: int = 10, dst_policy: str = "first",
                     wait: float | None = 10.0) -> Receipt:
        """Create or replace a recurring schedule: cron expression in an IANA time zone (docs/time.md).

        Validated here first (``ValidationError`` naming the field); the engine also refuses
        a task type it has no handler for. Replacing a paused schedule leaves it paused
        (``receipt.paused``); ``resume_schedule`` fires it again.
        """
        body = upsert_schedule(schedule_id, task_type, cron, tenant, payload, timezone, priority, enabled,
                               misfire_policy, max_catch_up, dst_policy)
        return self._schedule_command(schedule_id, tenant, body, wait)

    def pause_schedule(self, schedule_id: str, *, tenant: str = "", reason: str = "",
                       wait: float | None = 10.0) -> Receipt:
        """Stop a schedule from firing (a run in flight finishes)."""
        return self._schedule_command(schedule_id, tenant, m.PauseSchedule(schedule_id, reason), wait)

    def resume_schedule(self, schedule_id: str, *, tenant: str = "", reason: str = "",
                        wait: float | None = 10.0) -> Receipt:
        """Let a paused schedule fire again, from its next occurrence after now (the paused time is not owed)."""
        return self._schedule_command(schedule_id, tenant, m.ResumeSchedule(schedule_id, reason), wait)

    def remove_schedule(self, schedule_id: str, *, tenant: str = "", reason: str = "",
                        wait: float | None = 10.0) -> Receipt:
        """Delete a schedule (its history stays in the log; a run in flight finishes)."""
        return self._schedule_command(schedule_id, tenant, m.RemoveSchedule(schedule_id, reason), wait)

    def schedules(self, tenant: str | None = None) -> list[ScheduleView]:
        """Every schedule in the projections of ``settings.state_dir`` (of one tenant if given)."""
        from engine.questions.schedules import schedules

        return schedules(self.settings, tenant)

    def schedule(self, schedule_id: str) -> ScheduleView | None:
        """One schedule as the projections of ``settings.state_dir`` know it."""
        from engine.questions.schedules import find_schedule

        found = find_schedule(self.settings, schedule_id)
        return found[1] if found else None

    def reschedule(self, job_id: str, run_at: datetime | float | None = None, delay: float | None = None, *,
                   tenant: str | None = None, reason: str = "", wait: float | None = 10.0) -> Receipt:
        """Move a scheduled (or retry-waiting) job to another due time; in the past means now.

        ``receipt.armed`` is the new due time once accepted; a job that is no longer waiting
        (running, finished, cancelled) is refused. Without ``tenant``, the job's own tenant is read from its
        history, as :meth:`Client.cancel` does (``NotFoundError`` if it has none).
        """
        tenant = self.tenant_of(job_id, "reschedule") if tenant is None else tenant
        command = new_command(job_id, tenant, m.RescheduleJob(_when_us(run_at, delay), reason))
        return self._decided(job_id, command, wait)

    # --- internals -----------------------------------------------------------------------

    def _schedule_command(self, schedule_id: str, tenant: str, body: m.CommandBody,
                          wait: float | None) -> Receipt:
        return self._decided(schedule_id, new_command(envelope_id(schedule_id), tenant, body), wait)

    def _decided(self, subject: str, command: m.Command, wait: float | None) -> Receipt:
        handle = self._send([command])[0]
        receipt = Receipt(subject, command.command_id)
        if wait:
            _await_decision(self.settings, handle.partition, handle.start_offset, receipt, wait)
        return receipt


def _when_us(run_at: datetime | float | None, delay: float | None) -> int:
    when = due_us(run_at, delay)
    if when is None:
        raise ValidationError("run_at: give run_at or delay", "run_at")
    return when


def _await_decision(settings: Settings, partition: int, start: int, receipt: Receipt, timeout: float) -> None:
    """Follow the subject's events partition until the events caused by the command are read."""
    topic = settings.events_topic
    with topic_reader(settings, "schedule", waiter=True) as reader:
        reader.assign(topic, {partition: start})
        deadline, settle = time.monotonic() + timeout, None
        while time.monotonic() < (settle or deadline):
            for record in reader.read(500, 0.1):
                event = decode_event_at(record.value(), topic, partition, record.offset())  # type: ignore[arg-type]
                if event.causation_id == receipt.command_id:
                    receipt.take(event)
                    settle = settle or time.monotonic() + 0.3  # the rest of the decision's transaction
