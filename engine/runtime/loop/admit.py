"""The commands step: decode each command of an active partition and decide it.

An undecodable record is quarantined (``CommandQuarantined``); a command with a string over its
bound (``engine.contract.bounds``) is rejected or refused naming the field, before anything of it
is copied into an event; a command for another partition is rejected; the rest go where
``engine.domain.commands`` routes them: a schedule command to the partition's schedule desk, a
pause or rate limit to ``engine.domain.tasktypes``, a job command to ``decide`` (a ``SubmitJob``
with the backpressure inputs of the moment). Each command is one input: if any of that raises, it is set aside
(``engine.runtime.loop.poison``), never fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from engine.contract import messages as m
from engine.contract.bounds import ENVELOPE, check_bounds, tenant_bound
from engine.contract.codec import decode_command_at
from engine.contract.partitioner import partition_for
from engine.contract.signing import Proof, Signer
from engine.domain import authority
from engine.domain.decide import CommandInput, DecideContext, Emit, Limits, TaskPolicy
from engine.domain.lanes import Lane, lane_for
from engine.domain import tasktypes
from engine.domain.commands import COMMANDS, Route, Sender, route_of
from engine.domain.ratelimits import Bucket
from engine.domain.remote import attempt_pool
from engine.errors import DecodeError, ValidationError
from engine.runtime.execution.outputs import OutputRecord, reserved_refusal
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.effects import Output
from engine.runtime.loop.poison import PoisonDesk, quarantined
from engine.runtime.loop.schedules import ScheduleDesk
from engine.runtime.remote.dispatch import decode_records
from projections.views.counters import lane_depth, tenant_backlog
from projections.views.dependencies import read_report
from projections.views.pauses import is_paused
from projections.views.ratelimits import read_limit

log = logging.getLogger("epochq.admit")
NO_LIMITS = Limits()
UNSIGNED = Proof()
QUEUED_LANES = tuple(ln.value for ln in (Lane.HIGH, Lane.NORMAL, Lane.LOW, Lane.BATCH))


@dataclass(frozen=True, slots=True)
class Admission:
    """What deciding a command needs besides the partition's draft: topic layout, tenants, limits, policies."""

    topic: str
    partitions: int
    tasks: dict[str, TaskPolicy] | None
    lane_limits: dict[Lane, int]
    max_queued: Callable[[str], int | None]
    scope: Callable[[str | None], tuple[str, ...]]
    poison: PoisonDesk
    authenticate: Callable[[m.Command, bytes, bytes | None, str | None], Proof] | None = None
    """What a command's signature proves (``engine.runtime.signatures.CommandChecker``); for a worker's result, given
    the pool the attempt was dispatched to."""
    namespace: str | None = None
    """The engine's namespace: a remote result's record for one of its topics (or an internal one) is refused, as
    ``ctx.produce`` refuses it in process (``engine.runtime.execution.outputs.reserved_refusal``)."""
    pool_of: Callable[[str], str | None] = field(default=lambda task_type: None)
    """The pool the catalog sends a task type to: a running attempt's pool when its start (before v7) did not say."""
    refused_outputs: dict[tuple[str, int], str] = field(default_factory=dict)
    """Remote attempts (job id, attempt) whose records the brokers refused in a transaction that then aborted: decided
    again as failures (``OutputRefusedError``), never written again (the loop fills it; loop/effects.py)."""

    def admit(self, draft: Draft, offset: int, raw: bytes, ctx: DecideContext,
              signature: bytes | None = None, desk: ScheduleDesk | None = None) -> None:
        """Decide the command at ``offset`` into the draft (``signature``: its signature header; ``desk``: the
        partition's schedules); set it aside if that raises."""
        command: list[m.Command] = []
        error = draft.attempt(self._one, draft, offset, raw, ctx, command, signature, desk)
        if error is not None:
            self.poison.command(draft, command[0] if command else None, offset, raw or b"", error, ctx, self.topic)
        draft.consumed(offset)

    def _one(self, draft: Draft, offset: int, raw: bytes, ctx: DecideContext,
             seen: list[m.Command], signature: bytes | None, desk: ScheduleDesk | None) -> None:
        try:
            command = decode_command_at(raw, self.topic, draft.number, offset)
        except DecodeError as e:
            log.warning("quarantined %s", e)
            body = quarantined(self.topic, draft.number, offset, e.reason, raw)
            draft.stage(Emit(None, None, body), ctx.now)
            return
        seen.append(command)
        try:
            check_bounds(command)
        except ValidationError as e:
            self._out_of_bounds(draft, command, e, ctx)
            return
        proof = self._prove(draft, command, raw, signature)
        if proof.signer is Signer.TENANT and proof.refusal is None:  # a tenant's key: that tenant's powers only
            proof = self._authorize(desk, command, proof)
        if proof.refusal is not None:
            self._refuse(draft, command, proof, ctx)
            return
        if not proof.by_engine and self._other_tenant(draft, command, ctx):
            return
        self._decide(draft, command, offset, ctx, desk)

    def _prove(self, draft: Draft, command: m.Command, raw: bytes, signature: bytes | None) -> Proof:
        """What the command's signature proves; a worker's result is judged by the pool its attempt went to."""
        if self.authenticate is None:
            return UNSIGNED
        pool = attempt_pool(draft.job(command.job_id), self.pool_of) if isinstance(command.body, m.ReportAttempt) \
            else None
        return self.authenticate(command, raw, signature, pool)

    def _authorize(self, desk: ScheduleDesk | None, command: m.Command, proof: Proof) -> Proof:
        """The proof, or a refusal if the signing tenant asks for what is beyond its powers (domain/authority.py)."""
        owner = None
        if route_of(command) is Route.SCHEDULE and desk is not None:
            view = desk.view(getattr(command.body, "schedule_id", ""))
            owner = view.tenant_id if view is not None else None
        why = authority.refusal(command, proof.signer, owner)
        return proof if why is None else Proof(why, proof.signer, "unauthorized")

    def _other_tenant(self, draft: Draft, command: m.Command, ctx: DecideContext) -> bool:
        """Refuse a command on an existing job of another tenant (cancel, replay, reschedule, …); True if refused.

        A SubmitJob for an existing job is decide's (a duplicate or a refusal); commands only engines
        send (reports to a parent of another tenant) are checked by their signature."""
        body, kind = command.body, COMMANDS[type(command.body)]
        if isinstance(body, m.SubmitJob) or kind.route is Route.SCHEDULE or kind.sender is Sender.ENGINE:
            return False
        job = draft.job(command.job_id)
        if job is None or job.tenant_id == command.tenant_id:
            return False
        log.warning("command %s for job %s refused: tenant %r is not the job's", command.command_id,
                    command.job_id, command.tenant_id)
        refusal = m.CommandRefused(type(body).__name__, job.state.value,
                                   f"tenant: job {command.job_id} is not tenant {command.tenant_id!r}'s")
        draft.stage(Emit(command.job_id, job.tenant_id, refusal), ctx.now, command.command_id,
                        command.correlation_id)
        return True

    def _out_of_bounds(self, draft: Draft, command: m.Command, error: ValidationError,
                       ctx: DecideContext) -> None:
        """Answer a command with a string over its bound: a new job is rejected, an existing one refused.

        The answer copies nothing over a bound: an id too long is left out of it (the command's id as its
        causation, the job id as its key), and so is a task type no handler is registered for."""
        log.warning("command at partition %d over a bound: %s", draft.number, error)
        ids = {name: getattr(command, name) for name, bound in ENVELOPE
               if getattr(command, name) is not None and len(getattr(command, name)) <= bound}
        job_id = ids.get("job_id")
        job = draft.job(job_id) if job_id is not None else None
        body = command.body
        if isinstance(body, m.SubmitJob) and job is None:
            task = body.task_type if self.tasks is not None and body.task_type in self.tasks else ""
            answer: m.EventBody = m.JobRejected(task, error.reason, str(error))
        else:
            answer = m.CommandRefused(type(body).__name__, job.state.value if job is not None else "unknown",
                                      str(error))
        tenant = job.tenant_id if job is not None else \
            (command.tenant_id if len(command.tenant_id) <= tenant_bound(body) else None)
        draft.stage(Emit(job_id, tenant, answer), ctx.now, ids.get("command_id"), ids.get("correlation_id"))

    def _refuse(self, draft: Draft, command: m.Command, proof: Proof, ctx: DecideContext) -> None:
        """Refuse a command that does not prove its tenant, or asks for what its signer may not do: a new job is
        rejected (reason ``unauthenticated`` or ``unauthorized``), an existing one (or schedule) untouched."""
        why, reason = proof.refusal or "", proof.reason
        log.warning("%s command %s (%s) for %s (tenant %r) refused: %s", reason, command.command_id,
                    type(command.body).__name__, command.job_id, command.tenant_id, why)
        body, job = command.body, draft.job(command.job_id)
        if isinstance(body, m.SubmitJob) and job is None:
            emit = Emit(command.job_id, command.tenant_id, m.JobRejected(body.task_type, reason, why))
        else:
            state = job.state.value if job is not None else "unknown"
            emit = Emit(command.job_id, command.tenant_id, m.CommandRefused(type(body).__name__, state,
                                                                            f"{reason}: {why}"))
        draft.stage(emit, ctx.now, command.command_id, command.correlation_id)

    def _decide(self, draft: Draft, command: m.Command, offset: int, ctx: DecideContext,
                desk: ScheduleDesk | None) -> None:
        home = partition_for(command.job_id, self.partitions)
        if home != draft.number:
            task = command.body.task_type if isinstance(command.body, m.SubmitJob) else ""
            detail = (f"job {command.job_id} belongs to partition {home}, not {draft.number}: "
                      "produce with Java-compatible murmur2 partitioning")
            rejected = m.JobRejected(task, "wrong_partition", detail)
            draft.stage(Emit(command.job_id, command.tenant_id, rejected), ctx.now, command.command_id,
                            command.correlation_id)
            return
        route = route_of(command)  # engine/domain/commands.py: which commands exist, and where each goes
        if route is Route.SCHEDULE:  # its "job" is the schedule: engine/runtime/loop/schedules.py
            assert desk is not None, "an active partition has its schedule desk"
            desk.decide(getattr(command.body, "schedule_id", ""), CommandInput(command, offset), ctx,
                        command.command_id, command.correlation_id)
        elif route is Route.TASK_TYPE:  # its "job" is the task type in this partition
            self._task_type(draft, command, ctx)
        else:
            self._job(draft, command, offset, ctx)

    def _job(self, draft: Draft, command: m.Command, offset: int, ctx: DecideContext) -> None:
        """A command for the job it names: decided with the backpressure inputs and scope of the moment."""
        body = command.body
        if isinstance(body, m.ReportDependency):  # what the job was told of that dependency already
            ctx = replace(ctx, reported=read_report(draft.batch, command.job_id, body.dependency_job_id))
        elif isinstance(body, m.SubmitJob):
            limits = self._limits(draft, command)
            scoped = self.scope(body.scope) if body.scope not in (None, "tenant") else ()
            if limits is not NO_LIMITS or scoped:
                ctx = replace(ctx, limits=limits, scope_tenants=scoped)
        outputs: tuple[OutputRecord, ...] = ()
        if isinstance(body, m.ReportAttempt) and body.records is not None:
            command, outputs = self._remote_outputs(command, body)
        start = len(draft.staged.events)
        draft.decide(command.job_id, CommandInput(command, offset), ctx, command.command_id,
                         command.correlation_id)
        if outputs and any(isinstance(e.body, m.JobSucceeded) for e in draft.staged.events[start:]):
            draft.staged.outputs.append(Output(command.job_id, body.attempt, outputs))  # type: ignore[union-attr]
        if isinstance(body, m.SubmitJob) and body.traceparent:  # a job refused or fanned out is traced too
            draft.staged.trace(start, body.traceparent, replace=False)

    def _remote_outputs(self, command: m.Command,
                        body: m.ReportAttempt) -> tuple[m.Command, tuple[OutputRecord, ...]]:
        """A remote success's records, to write with its ``JobSucceeded``; or, for records that cannot be read or
        that the brokers refused before, the command as the attempt's failure (retried by its policy)."""
        why = self.refused_outputs.pop((command.job_id, body.attempt), None)
        try:
            records = decode_records(body.records or b"[]") if why is None else ()
        except DecodeError as e:
            why = e.reason
        reserved = next((r for record in records if self.namespace is not None
                         and (r := reserved_refusal(self.namespace, record.topic)) is not None), None)
        if reserved is not None:  # never a retry: the handler asked for a topic it may never write
            log.warning("job %s attempt %d: %s", command.job_id, body.attempt, reserved)
            invalid = replace(body, outcome="invalid", result=None, error_type="ValidationError", retryable=False,
                              message=reserved, records=None)
            return replace(command, body=invalid), ()
        if why is None:
            return command, records
        log.warning("job %s attempt %d: a record its remote handler produced was refused (%s); recorded as failed",
                    command.job_id, body.attempt, why)
        failed = replace(body, outcome="failed", result=None, error_type="OutputRefusedError", retryable=True,
                         message=f"a record it produced was refused: {why}", records=None)
        return replace(command, body=failed), ()

    def _task_type(self, draft: Draft, command: m.Command, ctx: DecideContext) -> None:
        """A pause, resume or rate limit of a task type in this partition (``engine.domain.tasktypes``)."""
        def bucket(task_type: str) -> Bucket | None:
            record = read_limit(draft.batch, task_type)
            return record.bucket if record is not None else None

        body = tasktypes.decide(command, lambda task_type: is_paused(draft.batch, task_type), bucket,
                                self.partitions)
        change = tasktypes.changed(body)
        if change is not None:
            log.warning("%s in partition %d (%s)", change, draft.number,
                        getattr(body, "reason", "") or "no reason given")
        draft.stage(Emit(command.job_id, command.tenant_id or None, body), ctx.now, command.command_id,
                        command.correlation_id)

    def _limits(self, draft: Draft, command: m.Command) -> Limits:
        """Backpressure inputs for one SubmitJob: queue depths now (pending decisions included), and the limits."""
        body = command.body
        assert isinstance(body, m.SubmitJob)
        tenant_max = self.max_queued(command.tenant_id)
        if tenant_max is None and not self.lane_limits:
            return NO_LIMITS
        try:
            lane = lane_for(body.priority, body.lane, (self.tasks or {}).get(body.task_type, TaskPolicy()).lane)
        except (ValidationError, ValueError):
            return NO_LIMITS
        lane_max = self.lane_limits.get(lane)
        if tenant_max is None and lane_max is None:
            return NO_LIMITS
        batch = draft.batch
        tenant_depth = tenant_backlog(batch, command.tenant_id, QUEUED_LANES)
        return Limits(tenant_depth, tenant_max, lane_depth(batch, lane.value), lane_max)
