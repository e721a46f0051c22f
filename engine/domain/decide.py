"""What should happen next for one job: ``decide(job, input, ctx) -> [Emit]``. Pure.

The engine loop calls decide with the job as the projection (plus its overlay of
not-yet-read-back events) knows it, writes the returned events, and acts only on
what it has written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.switch import type_switch
from engine.contract.ids import child_job_id
from engine.contract.validation import check_job_command, check_submit, invalid, shown
from engine.domain.jobs import JobView, reported
from engine.domain.jobs import replace as replace_job
from engine.domain.lanes import lane_for
from engine.domain.lifecycle import JobState, Trigger, allows
from engine.domain.retry import RetryPolicy, backoff_us, should_retry
from engine.errors import ValidationError


@dataclass(frozen=True, slots=True)
class TaskPolicy:
    """What decide must know of a task type: its retry policy and pinned lane."""

    retry: RetryPolicy = RetryPolicy()
    lane: str | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Queue depths at admission and their limits (None: unlimited): backpressure's inputs."""

    tenant_depth: int = 0
    tenant_max: int | None = None
    lane_depth: int = 0
    lane_max: int | None = None


@dataclass(frozen=True, slots=True)
class DecideContext:
    """Everything decide may depend on besides the job: time, limits, task policies."""

    now: int
    epoch: int = 0
    max_payload_bytes: int = 512 * 1024
    tasks: Mapping[str, TaskPolicy] | None = None  # None: accept any task type
    default_policy: TaskPolicy = TaskPolicy()
    limits: Limits = Limits()
    scope_tenants: tuple[str, ...] = ()  # the tenants a scoped SubmitJob resolves to (engine-resolved)

    def policy(self, task_type: str) -> TaskPolicy:
        """The task type's policy, or the default one."""
        if self.tasks is None:
            return self.default_policy
        return self.tasks.get(task_type, self.default_policy)


class Emit(NamedTuple):
    """One event decide wants written, before the engine adds id, epoch, owner and time.

    A named tuple rather than a frozen dataclass: one is built per event on the hot path."""

    job_id: str | None
    tenant_id: str | None
    body: m.EventBody


# --- inputs that are not commands --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandInput:
    """A command read from partition p of ``<ns>.commands`` at ``offset``."""

    command: m.Command
    offset: int


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The job's due time has come (a delay or a retry backoff ended)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class StartAttempt:
    """The executor has a free slot for this queued job."""

    job_id: str
    worker: str = ""
    fair_units: int = 0


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    """A handler returned (or raised) for ``attempt`` of the job."""

    job_id: str
    attempt: int
    kind: str  # succeeded | failed | invalid | cancelled (stopped after a cancel request)
    duration_us: int
    result: bytes | None = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    retryable: bool = True


@dataclass(frozen=True, slots=True)
class RequeueOrphan:
    """The job was found running under an older epoch when this owner claimed the partition."""

    job_id: str


@dataclass(frozen=True, slots=True)
class ProgressReported:
    """A running attempt's latest ``ctx.progress`` report, as the executor collected it."""

    job_id: str
    attempt: int
    value: float | None
    message: str


Input = CommandInput | TimerFired | StartAttempt | AttemptFinished | RequeueOrphan | ProgressReported


def decide(job: JobView | None, given: Input, ctx: DecideContext) -> list[Emit | Send]:
    """The events that ``given`` causes for ``job`` (None: the job does not exist yet), and the
    commands to send with them (``Send``: a scoped job's children, a child's report)."""
    return notify_parent(job, _decide(given, job, ctx), ctx.now)


@type_switch
def _decide(given: object, job: JobView | None, ctx: DecideContext) -> list[Emit | Send]:
    raise TypeError(f"decide has no rule for {type(given).__name__}")


@_decide.register
def _(given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit | Send]:
    body = given.command.body
    if not isinstance(body, m.SubmitJob):  # a SubmitJob's rules are its admission's (_admit)
        try:
            check_job_command(given.command, ctx.now)
        except ValidationError as e:
            refusal = m.CommandRefused(type(body).__name__, job.state.value if job else "unknown", str(e))
            return [Emit(given.command.job_id, _tenant(given.command, job), refusal)]
    return _command(body, given, job, ctx)


def _tenant(cmd: m.Command, job: JobView | None) -> str:
    """The tenant of the events a command causes: the job's, when the job exists."""
    return job.tenant_id if job is not None else cmd.tenant_id


@type_switch
def _command(body: object, given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit | Send]:
    cmd = given.command
    refusal = m.CommandRefused(type(body).__name__, job.state.value if job else "unknown",
                               "this engine does not support the command")
    return [Emit(cmd.job_id, cmd.tenant_id, refusal)]


@dataclass(frozen=True, slots=True)
class Send:
    """A command decide wants produced to ``<ns>.commands`` in the same transaction as its events."""

    command: m.Command


@_command.register
def _(body: m.SubmitJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit | Send]:
    cmd = given.command
    if job is not None:  # a JobRejected here would read as the existing job's status
        return [_existing(body, cmd, job)]
    try:
        submitted = _admit(body, given, ctx)
    except ValidationError as e:
        return _rejected(cmd, body, m.JobRejected(body.task_type, e.reason, str(e)))
    full = _over_limit(ctx.limits)
    if full is not None:
        reason, detail, depth = full
        return _rejected(cmd, body, m.JobRejected(body.task_type, reason, detail, depth))
    first = Emit(cmd.job_id, cmd.tenant_id, submitted)
    if submitted.scope not in (None, "tenant"):
        return [first, *fan_out(cmd, body, ctx)]
    if body.run_at is not None and body.run_at > ctx.now:
        return [first, Emit(cmd.job_id, cmd.tenant_id, m.JobScheduled(body.run_at))]
    return [first, Emit(cmd.job_id, cmd.tenant_id, m.JobQueued("submitted"))]


def _rejected(cmd: m.Command, body: m.SubmitJob, rejection: m.JobRejected) -> list[Emit | Send]:
    out: list[Emit | Send] = [Emit(cmd.job_id, cmd.tenant_id, rejection)]
    if body.parent_job_id and rejection.reason != "invalid_parent_job_id":
        out.append(report_to_parent(body.parent_job_id, cmd.job_id, cmd.tenant_id, "rejected",
                                    f"{rejection.reason}: {rejection.detail}", cmd.issued_at))
    return out


def _existing(body: m.SubmitJob, cmd: m.Command, job: JobView) -> Emit:
    """A SubmitJob for a job that exists: a duplicate (same idempotency key) or a refusal; never a second job."""
    if body.idempotency_key is not None and body.idempotency_key == job.idempotency_key:
        return Emit(cmd.job_id, job.tenant_id, m.DuplicateSubmitted(body.idempotency_key, cmd.command_id))
    refusal = m.CommandRefused("SubmitJob", job.state.value, "a job with this id already exists")
    return Emit(cmd.job_id, job.tenant_id, refusal)


def _over_limit(limits: Limits) -> tuple[str, str, int] | None:
    """(reason, detail, depth) when admitting one more job would exceed a queue limit."""
    if limits.tenant_max is not None and limits.tenant_depth >= limits.tenant_max:
        return ("tenant_queue_full", f"the tenant has {limits.tenant_depth} queued jobs; its limit is "
                f"{limits.tenant_max}", limits.tenant_depth)
    if limits.lane_max is not None and limits.lane_depth >= limits.lane_max:
        return ("lane_queue_full", f"the lane has {limits.lane_depth} queued jobs; its limit is "
                f"{limits.lane_max}", limits.lane_depth)
    return None


def _admit(body: m.SubmitJob, given: CommandInput, ctx: DecideContext) -> m.JobSubmitted:
    """The JobSubmitted for an acceptable SubmitJob; ValidationError naming the field if not.

    A handler for the task type first (so every other rejection names a registered task type:
    a metric label a producer cannot multiply), then engine.contract.validation's rules.
    """
    if ctx.tasks is not None and body.task_type not in ctx.tasks:
        raise invalid("task_type", f"no handler is registered for task type {shown(body.task_type)}",
                      "unknown_task_type")
    check_submit(given.command, ctx.now, ctx.max_payload_bytes)
    policy = ctx.policy(body.task_type)
    lane = lane_for(body.priority, body.lane, policy.lane)
    attempts = body.max_attempts if body.max_attempts is not None else policy.retry.max_attempts
    return m.JobSubmitted(
        task_type=body.task_type, payload=body.payload, priority=body.priority, lane=lane.value,
        max_attempts=attempts, run_at=body.run_at, idempotency_key=body.idempotency_key,
        command_offset=given.offset, labels=dict(body.labels), scope=body.scope, parent_job_id=body.parent_job_id,
    )


@_command.register
def _(body: m.CancelJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    cmd = given.command
    if job is not None and job.state is JobState.RUNNING:
        return [Emit(cmd.job_id, job.tenant_id, _cancel_running(body, job))]
    refused = _refusal("CancelJob", job, Trigger.CANCEL)
    event = refused or m.JobCancelled(body.reason, body.requested_by)
    return [Emit(cmd.job_id, _tenant(cmd, job), event)]


@_command.register
def _(body: m.ReplayDeadJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    cmd = given.command
    refused = _refusal("ReplayDeadJob", job, Trigger.REPLAY)
    event = refused or m.JobReplayed(body.reason, body.requested_by)
    return [Emit(cmd.job_id, _tenant(cmd, job), event)]


def _cancel_running(body: m.CancelJob, job: JobView) -> m.EventBody:
    """A cancel of a running job: its attempt is asked to stop; the job is cancelled when the attempt ends."""
    if job.children or job.scope:
        return m.CommandRefused("CancelJob", job.state.value, "a scoped job is cancelled through its children")
    if job.cancel is not None:
        return m.CommandRefused("CancelJob", job.state.value, f"a cancel of attempt {job.attempt} is under way")
    return m.JobCancelRequested(job.attempt, body.reason, body.requested_by)


def _refusal(command: str, job: JobView | None, trigger: Trigger) -> m.CommandRefused | None:
    if job is None:
        return m.CommandRefused(command, "unknown", "no job with this id")
    if allows(job.state, trigger):
        return None
    return m.CommandRefused(command, job.state.value,
                            f"trigger {trigger.value!r} is not allowed in state {job.state.value!r}")


def fan_out(cmd: m.Command, body: m.SubmitJob, ctx: DecideContext) -> list[Emit | Send]:
    """A scoped job becomes one child job per tenant of its scope, submitted with the parent's events."""
    children = {tenant: child_job_id(cmd.job_id, tenant) for tenant in sorted(set(ctx.scope_tenants))}
    out: list[Emit | Send] = [Emit(cmd.job_id, cmd.tenant_id, m.JobFannedOut(body.scope or "", children))]
    for tenant, child in children.items():
        child_body = replace(body, scope=None, parent_job_id=cmd.job_id, idempotency_key=None)
        out.append(Send(m.Command(f"child:{child}", child, tenant, ctx.now, child_body, cmd.correlation_id)))
    if not children:
        out.append(Emit(cmd.job_id, cmd.tenant_id, m.JobSettled(0, 0, "completed")))
    return out


@_command.register
def _(body: m.ReportChild, given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    cmd = given.command
    known = {child: status for _, child, status, _ in job.children} if job else {}
    if job is None or body.child_job_id not in known:
        return [Emit(cmd.job_id, cmd.tenant_id, m.CommandRefused("ReportChild", job.state.value if job else "unknown",
                                                                  f"{body.child_job_id} is not a child of this job"))]
    if known[body.child_job_id] == body.status:
        return []
    report = m.ChildReported(body.child_job_id, body.child_tenant, body.status, body.error)
    out = [Emit(job.job_id, job.tenant_id, report)]
    done, failed, pending = replace_job(job, children=reported(job.children, report)).child_counts()
    if pending == 0 and (job.state is JobState.RUNNING or (job.state is JobState.PARTIAL and failed == 0)):
        outcome = "completed" if failed == 0 else ("failed" if done == 0 else "partial")
        out.append(Emit(job.job_id, job.tenant_id, m.JobSettled(done, failed, outcome)))
    return out


@_command.register
def _(body: m.RescheduleJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    cmd = given.command
    refused = _refusal("RescheduleJob", job, Trigger.RESCHEDULE)
    tenant = _tenant(cmd, job)
    if refused is None and body.run_at <= ctx.now:
        return [Emit(cmd.job_id, tenant, m.JobRescheduled(ctx.now, body.reason)),
                Emit(cmd.job_id, tenant, m.JobQueued("due"))]
    return [Emit(cmd.job_id, tenant, refused or m.JobRescheduled(body.run_at, body.reason))]


@_decide.register
def _(given: TimerFired, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    if job is None or job.state not in (JobState.SCHEDULED, JobState.RETRYING):
        return []
    if job.due_at is not None and job.due_at > ctx.now:
        return []
    cause = "due" if job.state is JobState.SCHEDULED else "retry_due"
    return [Emit(job.job_id, job.tenant_id, m.JobQueued(cause))]


@_decide.register
def _(given: StartAttempt, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    if job is None or job.state is not JobState.QUEUED:
        return []
    due = job.due_at if job.due_at is not None else job.submitted_at
    return [Emit(job.job_id, job.tenant_id, m.JobStarted(job.attempt + 1, due, given.worker, given.fair_units))]


@_decide.register
def _(given: AttemptFinished, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    if job is None or job.state is not JobState.RUNNING or job.attempt != given.attempt:
        return []
    emit: Callable[[m.EventBody], Emit] = lambda body: Emit(job.job_id, job.tenant_id, body)  # noqa: E731
    if given.kind == "succeeded":  # also after a cancel request: the work is done, its result stands
        return [emit(m.JobSucceeded(given.attempt, given.duration_us, given.result))]
    retryable = given.retryable and given.kind != "invalid"
    failed = m.JobFailed(given.attempt, given.error_type, given.message, given.duration_us,
                         given.traceback, retryable)
    if job.cancel is not None:  # asked to stop: it stopped (cancelled), or failed on the way; never retried
        cancelled = emit(m.JobCancelled(*job.cancel))
        return [cancelled] if given.kind == "cancelled" else [emit(failed), cancelled]
    return [emit(failed), emit(_after_failure(job, given, retryable, ctx))]


def notify_parent(job: JobView | None, outcome: list[Emit | Send], now: int) -> list[Emit | Send]:
    """Add a ReportChild for the parent when ``outcome`` brings a scoped job's child to a final state."""
    if job is None or not job.parent_job_id:
        return list(outcome)
    final = {m.JobSucceeded: "completed", m.JobDeadLettered: "dead", m.JobCancelled: "cancelled"}
    errors = [f"{e.body.error_type}: {e.body.message}" for e in outcome
              if isinstance(e, Emit) and isinstance(e.body, m.JobFailed)]
    for emit in outcome:
        if not isinstance(emit, Emit):
            continue
        status = final.get(type(emit.body))
        if status is not None:
            error = errors[-1] if errors else getattr(emit.body, "reason", "")
            return [*outcome, report_to_parent(job.parent_job_id, job.job_id, job.tenant_id, status, error, now)]
    return list(outcome)


def report_to_parent(parent: str, child: str, tenant: str, status: str, error: str, now: int) -> Send:
    """The command that tells a scoped job how its child for ``tenant`` ended."""
    body = m.ReportChild(parent, child, tenant, status, error)
    return Send(m.Command(f"report:{child}:{status}:{now}", parent, tenant, now, body))


def _after_failure(job: JobView, given: AttemptFinished, retryable: bool, ctx: DecideContext) -> m.EventBody:
    if should_retry(job.max_attempts, given.attempt, retryable):
        delay = backoff_us(ctx.policy(job.task_type).retry, given.attempt, job.job_id)
        return m.JobRetryScheduled(given.attempt + 1, ctx.now + delay)
    reason = "validation_failed" if given.kind == "invalid" else (
        "not_retryable" if not retryable else "max_attempts_exhausted")
    return m.JobDeadLettered(reason, given.attempt)


@_decide.register
def _(given: RequeueOrphan, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    if job is None or job.state is not JobState.RUNNING or not fence.older(job.epoch, ctx.epoch):
        return []
    if job.cancel is not None:  # its attempt was asked to stop: it is not run again
        return [Emit(job.job_id, job.tenant_id, m.JobCancelled(*job.cancel))]
    return [Emit(job.job_id, job.tenant_id, m.JobRequeued(job.epoch, job.attempt))]


@_decide.register
def _(given: ProgressReported, job: JobView | None, ctx: DecideContext) -> list[Emit]:
    if job is None or job.state is not JobState.RUNNING or job.attempt != given.attempt \
            or job.progress == (given.value, given.message):
        return []
    return [Emit(job.job_id, job.tenant_id, m.JobProgressed(given.attempt, given.value, given.message))]
