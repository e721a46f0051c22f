"""Whether a SubmitJob becomes a job, and which events it starts with: admission's rules. Pure."""

from __future__ import annotations

from dataclasses import replace

from engine.contract import messages as m
from engine.contract.ids import child_job_id
from engine.contract.validation import check_submit, invalid, shown
from engine.domain.children import report_to_parent
from engine.domain.dependencies import awaited
from engine.domain.inputs import CommandInput, DecideContext, Decision, Emit, Limits, Send
from engine.domain.jobs import JobView
from engine.domain.lanes import lane_for
from engine.errors import ValidationError


def submit(body: m.SubmitJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A new job's first events (submitted, then queued, scheduled, waiting for its dependencies or fanned out),
    or its rejection."""
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
    if submitted.depends_on:
        return [first, *awaited(cmd, submitted.depends_on, ctx.now)]
    if submitted.scope not in (None, "tenant"):
        return [first, *fan_out(cmd, body, ctx)]
    if body.run_at is not None and body.run_at > ctx.now:
        return [first, Emit(cmd.job_id, cmd.tenant_id, m.JobScheduled(body.run_at))]
    return [first, Emit(cmd.job_id, cmd.tenant_id, m.JobQueued("submitted"))]


def _rejected(cmd: m.Command, body: m.SubmitJob, rejection: m.JobRejected) -> Decision:
    out: Decision = [Emit(cmd.job_id, cmd.tenant_id, rejection)]
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
        depends_on=dict(body.depends_on),
        traceparent=body.traceparent,
    )


def fan_out(cmd: m.Command, body: m.SubmitJob, ctx: DecideContext) -> Decision:
    """A scoped job becomes one child job per tenant of its scope, submitted with the parent's events."""
    children = {tenant: child_job_id(cmd.job_id, tenant) for tenant in sorted(set(ctx.scope_tenants))}
    out: Decision = [Emit(cmd.job_id, cmd.tenant_id, m.JobFannedOut(body.scope or "", children))]
    for tenant, child in children.items():
        child_body = replace(body, scope=None, parent_job_id=cmd.job_id, idempotency_key=None)
        out.append(Send(m.Command(f"child:{child}", child, tenant, ctx.now, child_body, cmd.correlation_id)))
    if not children:
        out.append(Emit(cmd.job_id, cmd.tenant_id, m.JobSettled(0, 0, "completed")))
    return out
