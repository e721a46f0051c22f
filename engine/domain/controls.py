"""Operators' commands on one job (cancel, replay, reschedule, reprioritize): whether the job's state allows them.
Pure."""

from __future__ import annotations

from engine.contract import messages as m
from engine.domain.inputs import CommandInput, DecideContext, Decision, Emit, tenant_of
from engine.domain.jobs import JobView
from engine.domain.lanes import Lane, lane_for
from engine.domain.lifecycle import JobState, Trigger, allows


def cancel(body: m.CancelJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A waiting job is cancelled at once; a running one is asked to stop (JobCancelRequested)."""
    cmd = given.command
    if job is not None and job.state is JobState.RUNNING:
        return [Emit(cmd.job_id, job.tenant_id, _cancel_running(body, job))]
    refused = refusal("CancelJob", job, Trigger.CANCEL)
    event = refused or m.JobCancelled(body.reason, body.requested_by)
    return [Emit(cmd.job_id, tenant_of(cmd, job), event)]


def replay(body: m.ReplayDeadJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A dead job goes back to the queue."""
    cmd = given.command
    refused = refusal("ReplayDeadJob", job, Trigger.REPLAY)
    event = refused or m.JobReplayed(body.reason, body.requested_by)
    return [Emit(cmd.job_id, tenant_of(cmd, job), event)]


def reschedule(body: m.RescheduleJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A waiting job's due time moves; to now or earlier, and it is queued at once."""
    cmd = given.command
    refused = refusal("RescheduleJob", job, Trigger.RESCHEDULE)
    tenant = tenant_of(cmd, job)
    if refused is None and body.run_at <= ctx.now:
        return [Emit(cmd.job_id, tenant, m.JobRescheduled(ctx.now, body.reason)),
                Emit(cmd.job_id, tenant, m.JobQueued("due"))]
    return [Emit(cmd.job_id, tenant, refused or m.JobRescheduled(body.run_at, body.reason))]


def reprioritize(body: m.ReprioritizeJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A waiting job's priority changes (a queued one moves in its ready queue); refused once it has started."""
    cmd = given.command
    refused = refusal("ReprioritizeJob", job, Trigger.REPRIORITIZE)
    if job is None or refused is not None:
        return [Emit(cmd.job_id, tenant_of(cmd, job), refused or m.CommandRefused("ReprioritizeJob", "unknown", ""))]
    if job.priority == body.priority:
        same = f"the job's priority is {body.priority} already"
        return [Emit(cmd.job_id, job.tenant_id, m.CommandRefused("ReprioritizeJob", job.state.value, same))]
    lane = lane_after(job, body.priority, ctx.policy(job.task_type).lane)
    return [Emit(cmd.job_id, job.tenant_id,
                 m.JobReprioritized(body.priority, job.priority, lane, body.reason, body.requested_by))]


def lane_after(job: JobView, priority: int, pinned: str | None) -> str:
    """The job's lane at ``priority``: its priority's lane, unless it is pinned to one (BATCH, its task type's
    lane, or a lane asked for at submission that its priority would not give it)."""
    if job.lane == Lane.BATCH or job.lane != lane_for(job.priority, None, pinned).value:
        return job.lane
    return lane_for(priority, None, pinned).value


def _cancel_running(body: m.CancelJob, job: JobView) -> m.EventBody:
    """A cancel of a running job: its attempt is asked to stop; the job is cancelled when the attempt ends."""
    if job.children or job.scope:
        return m.CommandRefused("CancelJob", job.state.value, "a scoped job is cancelled through its children")
    if job.cancel is not None:
        return m.CommandRefused("CancelJob", job.state.value, f"a cancel of attempt {job.attempt} is under way")
    return m.JobCancelRequested(job.attempt, body.reason, body.requested_by)


def refusal(command: str, job: JobView | None, trigger: Trigger) -> m.CommandRefused | None:
    """The refusal of ``command`` when the job does not exist or its state has no ``trigger``; None if allowed."""
    if job is None:
        return m.CommandRefused(command, "unknown", "no job with this id")
    if allows(job.state, trigger):
        return None
    return m.CommandRefused(command, job.state.value, refused_because(trigger, job.state))


ONLY = {Trigger.CANCEL: "only a job that has not ended can be cancelled",
        Trigger.REPLAY: "only a dead job can be replayed",
        Trigger.RESCHEDULE: "only a scheduled or retrying job can be rescheduled",
        Trigger.REPRIORITIZE: "only a waiting (scheduled, queued or retrying) job can be reprioritized"}
"""What an operator's command needs of its job, in the words a refusal says it."""

ENDED = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.PARTIAL})


def refused_because(trigger: Trigger, state: JobState) -> str:
    """Why a job in ``state`` refuses ``trigger``, in plain words: ``job is already cancelled``, or ``only a
    dead job can be replayed; this one is queued``."""
    if trigger is Trigger.CANCEL and state in ENDED:
        return f"job is already {state.value}"
    return f"{ONLY.get(trigger, f'{trigger.value} is not possible now')}; this one is {state.value}"
