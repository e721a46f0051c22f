"""``TestEngine``: the engine's rules and a handler's real calls, in memory, on a clock the test moves.

For users' tests of their handlers and retry policies (like Oban.Testing, River's rivertest,
Temporal's time-skipping environment): no broker, no disk, no threads, no sleeping. Submit
as with ``Client``, then ``run_until_idle()`` or ``advance(hours=5)``; read ``status`` (the
client's ``Outcome``) and ``history`` (the events a reader of the log would get). What runs is
the engine's own decide/evolve, admission, fair dispatch, timers, schedules, breakers and the
executor's handler call (``engine.testing.virtual``); docs/testing.md says what differs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from engine.app import App
from engine.commands import EPOCH, ONE_US, Receipt, due_us, now_us, submit_command, upsert_schedule
from engine.contract import messages as m
from engine.contract.ids import new_uuid4s
from engine.contract.validation import check_job_command, check_schedule_command
from engine.domain.lanes import Lane
from engine.domain.schedules import ScheduleView, envelope_id
from engine.domain.timerouter import SECOND
from engine.errors import NotFoundError, ValidationError
from engine.runtime.execution.outputs import OutputRecord
from engine.runtime.loop.options import DEFAULT_SLOTS
from engine.runtime.observe.tracing import current_traceparent
from engine.questions.outcome import Outcome
from engine.testing.virtual import Setup, VirtualLoop
from engine.testing.runner import InlineRunner
from projections.views.schedules import all_schedules, read_schedule


class TestHandle:
    """A job submitted to a ``TestEngine``: its id, and its outcome once the engine has run."""

    __test__ = False  # not a pytest test class
    __slots__ = ("engine", "job_id", "command_id")

    def __init__(self, engine: TestEngine, job_id: str, command_id: str | None = None):
        self.engine, self.job_id, self.command_id = engine, job_id, command_id

    def status(self) -> Outcome:
        """The job's outcome as its events stand now (``duplicate``: this submit made no job, as ``Client``'s)."""
        return self.engine.status(self.job_id, command_id=self.command_id)

    def wait(self, timeout: float = 0.0) -> Outcome:
        """Run the engine until idle (nothing due now), then the job's outcome; ``timeout`` is ignored:
        time moves only with ``advance``."""
        self.engine.run_until_idle()
        return self.status()


class TestEngine:
    """An engine on a virtual clock, in memory: the same rules as ``epochq engine run``, for a test.

    ``start``: the virtual clock's first reading (an aware datetime or seconds since 1970; now by
    default). ``lane_slots``, ``lane_limits``, ``fair``: as the engine's options; ``weights`` and
    ``max_queued``: per tenant, as the tenants table would say (weight 1, no limit otherwise).
    ``namespace``: the engine's, whose topics ``ctx.produce`` refuses as a real engine does.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, app: App, *, start: datetime | float | None = None,
                 lane_slots: Mapping[Lane | str, int] | None = None,
                 lane_limits: Mapping[Lane | str, int] | None = None,
                 weights: Mapping[str, float] | None = None, max_queued: Mapping[str, int] | None = None,
                 fair: bool = True, max_payload_bytes: int = 512 * 1024, namespace: str = "epochq"):
        slots = {**DEFAULT_SLOTS, **_by_lane(lane_slots or {}, "lane_slots")}
        settings = Setup(slots, _by_lane(lane_limits or {}, "lane_limits"), dict(weights or {}),
                            dict(max_queued or {}), fair, max_payload_bytes)
        self._runner = InlineRunner(app, namespace)
        breakers = {n: b for n in app.task_types if (b := app.spec(n).breaker)}
        self._loop = VirtualLoop(settings, _start_us(start), self._runner, app.policies(), breakers)

    def __enter__(self) -> TestEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the event loop of async handlers, if one was made."""
        self._runner.close()

    # --- the clock ---------------------------------------------------------------------------

    @property
    def now_us(self) -> int:
        """The virtual clock, in µs since 1970 (UTC)."""
        return self._loop.now

    @property
    def now(self) -> datetime:
        """The virtual clock as an aware datetime (UTC)."""
        return datetime.fromtimestamp(self._loop.now / SECOND, UTC)

    def run_until_idle(self) -> int:
        """Decide and run everything that can happen without the clock moving; how many ticks it took.

        Commands sent are decided, queued jobs start (as many at once as the lanes have slots), their
        results are recorded, retries due now fire... until nothing more happens at this instant."""
        return self._loop.run_until_idle()

    def advance(self, *, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0) -> None:
        """Move the clock forward, stopping at each due time on the way (delays, retries, schedules,
        breaker cool-downs), earliest first, and running until idle at each."""
        delta = round((seconds + 60 * minutes + 3600 * hours + 86_400 * days) * SECOND)
        if delta < 0:
            raise ValidationError(f"advance: the clock only moves forward, got {delta / SECOND:g} s", "seconds")
        self._loop.advance_to(self._loop.now + delta)

    # --- commands, as Client sends them --------------------------------------------------------

    def submit(self, task_type: str, payload: Any = None, *, tenant: str, priority: int | str = 5,
               run_at: datetime | float | None = None, delay: float | None = None,
               idempotency_key: str | None = None, lane: str | None = None,
               max_attempts: int | None = None, correlation_id: str | None = None,
               scope: str | None = None, labels: Mapping[str, str] | None = None,
               depends_on: Iterable[Any] | None = None, if_dependency_fails: str = "cancel") -> TestHandle:
        """Submit one job, as ``Client.submit`` (``delay`` and ``run_at`` on the virtual clock; ``depends_on``:
        jobs it waits for); it is decided at the next ``run_until_idle`` or ``advance``. A bad value raises
        ``ValidationError``. The current span's ``traceparent`` goes with the job, as ``Client.submit`` sends it
        (``ctx.traceparent``, docs/tracing.md)."""
        job_id, command_id = new_uuid4s(2)
        command = submit_command(job_id, command_id, self._loop.now, task_type, payload, tenant, priority, run_at,
                                 delay, idempotency_key, lane, max_attempts, correlation_id, scope, labels,
                                 max_payload_bytes=self._loop.settings.max_payload_bytes, depends_on=depends_on,
                                 if_dependency_fails=if_dependency_fails, traceparent=current_traceparent())
        self._loop.send(command)
        return TestHandle(self, command.job_id, command.command_id)

    def cancel(self, job_id: str, *, tenant: str | None = None, reason: str = "",
               requested_by: str = "") -> TestHandle:
        """Cancel a job, as ``Client.cancel`` (without ``tenant``, the job's own)."""
        return self._job_command(job_id, tenant, m.CancelJob(reason, requested_by), "cancel")

    def replay(self, job_id: str, *, tenant: str | None = None, reason: str = "",
               requested_by: str = "") -> TestHandle:
        """Put a dead-lettered job back with a fresh attempt count, as ``Client.replay``."""
        return self._job_command(job_id, tenant, m.ReplayDeadJob(reason, requested_by), "replay")

    def reschedule(self, job_id: str, run_at: datetime | float | None = None, delay: float | None = None, *,
                   tenant: str | None = None, reason: str = "") -> Receipt:
        """Move a waiting job to another due time (on the virtual clock), as ``Client.reschedule``; decided
        at once (``receipt.armed``: the new due time). Without ``tenant``, the job's own."""
        when = due_us(run_at, delay, self._loop.now)
        if when is None:
            raise ValidationError("run_at: give run_at or delay", "run_at")
        tenant = self._tenant_of(job_id, "reschedule") if tenant is None else tenant
        command = self._command(job_id, tenant, m.RescheduleJob(when, reason))
        check_job_command(command, self._loop.now)
        return self._decided(job_id, command)

    # --- schedules, as the schedule client does them ----------------------------------------------

    def add_schedule(self, schedule_id: str, task_type: str, cron: str, *, tenant: str, payload: Any = None,
                     timezone: str = "UTC", priority: int | str = 5, enabled: bool = True,
                     misfire_policy: str = "skip", max_catch_up: int = 10, dst_policy: str = "first") -> Receipt:
        """Create or replace a recurring schedule, as ``Client.add_schedule``; decided at once (the receipt
        says ``accepted`` or ``refused``, and ``armed``: the first occurrence, µs)."""
        body = upsert_schedule(schedule_id, task_type, cron, tenant, payload, timezone, priority, enabled,
                               misfire_policy, max_catch_up, dst_policy)
        return self._schedule_command(schedule_id, tenant, body)

    def pause_schedule(self, schedule_id: str, *, tenant: str = "", reason: str = "") -> Receipt:
        """Stop a schedule from firing."""
        return self._schedule_command(schedule_id, tenant, m.PauseSchedule(schedule_id, reason))

    def resume_schedule(self, schedule_id: str, *, tenant: str = "", reason: str = "") -> Receipt:
        """Let a paused schedule fire again, from its next occurrence after now."""
        return self._schedule_command(schedule_id, tenant, m.ResumeSchedule(schedule_id, reason))

    def remove_schedule(self, schedule_id: str, *, tenant: str = "", reason: str = "") -> Receipt:
        """Delete a schedule."""
        return self._schedule_command(schedule_id, tenant, m.RemoveSchedule(schedule_id, reason))

    def schedules(self, tenant: str | None = None) -> list[ScheduleView]:
        """Every schedule (of one tenant if given), as ``Client.schedules``."""
        found = all_schedules(self._loop.store)
        return [s for s in found if tenant is None or s.tenant_id == tenant]

    def schedule(self, schedule_id: str) -> ScheduleView | None:
        """One schedule, or None."""
        return read_schedule(self._loop.store, schedule_id)

    # --- reading ------------------------------------------------------------------------------

    def status(self, job_id: str, *, command_id: str | None = None) -> Outcome:
        """The job's outcome folded from its events, as ``Client.status`` (``unknown`` before any); ``duplicate``
        only for the submit ``command_id`` names."""
        outcome = Outcome(job_id, status="unknown", command_id=command_id)
        for logged in self._loop.by_job.get(job_id, []):
            outcome.apply(logged)
        return outcome

    def history(self, job_id: str) -> list[m.Event]:
        """Every event of the job, in log order: the types of ``engine.contract.messages``, decoded from Avro."""
        return [logged.event for logged in self._loop.by_job.get(job_id, [])]

    def produced(self, topic: str | None = None) -> list[OutputRecord]:
        """The records handlers produced (``ctx.produce``) with their attempts' successes, in order (of ``topic``)."""
        return [r for r in self._loop.produced if topic is None or r.topic == topic]

    def events(self) -> list[m.Event]:
        """Every event written so far, of every job (and the partition's claim), in log order."""
        return [logged.event for logged in self._loop.log]

    # --- internals ----------------------------------------------------------------------------

    def _command(self, job_id: str, tenant: str, body: m.CommandBody) -> m.Command:
        return m.Command(str(uuid.uuid4()), job_id, tenant, self._loop.now, body)

    def _job_command(self, job_id: str, tenant: str | None, body: m.CommandBody, what: str) -> TestHandle:
        command = self._command(job_id, self._tenant_of(job_id, what) if tenant is None else tenant, body)
        check_job_command(command, self._loop.now)
        self._loop.send(command)
        return TestHandle(self, job_id)

    def _tenant_of(self, job_id: str, what: str) -> str:
        for logged in self._loop.by_job.get(job_id, []):
            if logged.event.tenant_id:
                return logged.event.tenant_id
        raise NotFoundError(f"unknown job {job_id}: no events yet (give the tenant to send the {what} anyway)")

    def _schedule_command(self, schedule_id: str, tenant: str, body: m.CommandBody) -> Receipt:
        command = self._command(envelope_id(schedule_id), tenant, body)
        check_schedule_command(command)
        return self._decided(schedule_id, command)

    def _decided(self, subject: str, command: m.Command) -> Receipt:
        """Send ``command``, run until idle, and say what it caused."""
        start = len(self._loop.log)
        self._loop.send(command)
        self._loop.run_until_idle()
        receipt = Receipt(subject, command.command_id)
        for logged in self._loop.log[start:]:
            if logged.event.causation_id == command.command_id:
                receipt.take(logged.event)
        return receipt


def _by_lane(values: Mapping[Lane | str, int], name: str) -> dict[Lane, int]:
    try:
        return {Lane(str(lane).upper()): int(n) for lane, n in values.items()}
    except ValueError as e:
        raise ValidationError(f"{name}: {e}", name) from None


def _start_us(start: datetime | float | None) -> int:
    if start is None:
        return now_us()
    if isinstance(start, datetime):
        if start.tzinfo is None:
            raise ValidationError("start: a datetime must be timezone-aware", "start")
        return (start - EPOCH) // ONE_US
    return round(start * SECOND)

