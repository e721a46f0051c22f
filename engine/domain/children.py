"""A scoped job and its children: how a child's end is reported to its parent, and how the parent settles. Pure."""

from __future__ import annotations

from engine.contract import messages as m
from engine.domain.inputs import CommandInput, DecideContext, Decision, Emit, Send
from engine.domain.jobs import JobView, reported
from engine.domain.jobs import replace as replace_job
from engine.domain.lifecycle import JobState

FINAL = {m.JobSucceeded: "completed", m.JobDeadLettered: "dead", m.JobCancelled: "cancelled"}
"""The events that end a child, and the status its parent is told."""


def report_child(body: m.ReportChild, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A child's report to its (scoped) parent: recorded, and the parent settled once no child is pending."""
    cmd = given.command
    known = {child: status for _, child, status, _ in job.children} if job else {}
    if job is None or body.child_job_id not in known:
        return [Emit(cmd.job_id, cmd.tenant_id, m.CommandRefused("ReportChild", job.state.value if job else "unknown",
                                                                  f"{body.child_job_id} is not a child of this job"))]
    if known[body.child_job_id] == body.status:
        return []
    report = m.ChildReported(body.child_job_id, body.child_tenant, body.status, body.error)
    out: Decision = [Emit(job.job_id, job.tenant_id, report)]
    done, failed, pending = replace_job(job, children=reported(job.children, report)).child_counts()
    if pending == 0 and (job.state is JobState.RUNNING or (job.state is JobState.PARTIAL and failed == 0)):
        outcome = "completed" if failed == 0 else ("failed" if done == 0 else "partial")
        out.append(Emit(job.job_id, job.tenant_id, m.JobSettled(done, failed, outcome)))
    return out


def notify_parent(job: JobView | None, outcome: Decision, now: int) -> Decision:
    """Add a ReportChild for the parent when ``outcome`` brings a scoped job's child to a final state."""
    if job is None or not job.parent_job_id:
        return list(outcome)
    errors = [f"{e.body.error_type}: {e.body.message}" for e in outcome
              if isinstance(e, Emit) and isinstance(e.body, m.JobFailed)]
    for emit in outcome:
        if not isinstance(emit, Emit):
            continue
        status = FINAL.get(type(emit.body))
        if status is not None:
            error = errors[-1] if errors else getattr(emit.body, "reason", "")
            return [*outcome, report_to_parent(job.parent_job_id, job.job_id, job.tenant_id, status, error, now)]
    return list(outcome)


def report_to_parent(parent: str, child: str, tenant: str, status: str, error: str, now: int) -> Send:
    """The command that tells a scoped job how its child for ``tenant`` ended."""
    body = m.ReportChild(parent, child, tenant, status, error)
    return Send(m.Command(f"report:{child}:{status}:{now}", parent, tenant, now, body))
