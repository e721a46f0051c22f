"""Jobs that wait for jobs: when a dependent is released, cancelled or still waits, and who tells whom. Pure.

A dependency may live in any partition, so the two sides talk by commands, each produced by an
owner in the transaction of its own events (as a scoped job's children report to it)::

    dependent D (partition of D)            dependency X (partition of X)
    JobSubmitted(depends_on), DependenciesAwaited(n)
      + AwaitJob(D) to X  ───────────────►  X live:   DependentAdded(D)
                                            X ended:  ReportDependency(status, result) to D at once
                                            X unknown (never, another tenant's, or ended before the dedup
                                            window): ReportDependency(unknown) to D at once
                                            X ends later (JobSucceeded, JobDeadLettered, JobCancelled,
                                            JobSettled): ReportDependency to every dependent, in the
                        ◄───────────────    transaction of that event
    DependencyReported(X, status, result, error), then
      every dependency ended well (or failed under "run"): JobQueued(dependencies_met) / JobScheduled(run_at)
      one dead, cancelled or partial under "cancel":      JobCancelled("dependency_failed: …")
      one unknown:                                         JobCancelled("dependency_unknown: …")

Every hand-over is a committed command, every decision an event: a crash of either owner at any
point leaves the command or the event that the next owner acts on, never a wait for an event
that has already happened. docs/handlers.md ("Jobs that wait for jobs") tells it for users.
"""

from __future__ import annotations

from engine.contract import messages as m
from engine.contract.ids import dependency_command_id
from engine.domain.inputs import CommandInput, DecideContext, Decision, Emit, Send
from engine.domain.jobs import RELEASED, JobView
from engine.domain.lifecycle import JobState

ENDED_AS = {JobState.COMPLETED: "completed", JobState.DEAD: "dead", JobState.CANCELLED: "cancelled",
            JobState.PARTIAL: "partial"}
"""How a dependency that has ended is reported, by its state."""
ENDING = {m.JobSucceeded: "completed", m.JobDeadLettered: "dead", m.JobCancelled: "cancelled"}
"""The events that end a job, and the status its dependents are told (JobSettled: its outcome's)."""
UNKNOWN = "unknown"
BY = "epochq"
"""Who a cancel for a failed dependency is recorded as requested by."""


def awaited(cmd: m.Command, depends_on: dict[str, str], now: int) -> Decision:
    """A job submitted with dependencies waits for them: one AwaitJob to each dependency's partition."""
    out: Decision = [Emit(cmd.job_id, cmd.tenant_id, m.DependenciesAwaited(len(depends_on)))]
    for dependency in depends_on:
        out.append(Send(m.Command(dependency_command_id("await", cmd.job_id, dependency), dependency, cmd.tenant_id,
                                  now, m.AwaitJob(cmd.job_id), cmd.correlation_id)))
    return out


def await_job(body: m.AwaitJob, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    """A job waits for this one: it is recorded as a dependent, or told at once how this one ended (or that there
    is no such job of its tenant: another tenant's job is never revealed, nor waited on)."""
    cmd, dependent = given.command, body.dependent_job_id
    if job is None or job.tenant_id != cmd.tenant_id:
        why = f"no job {cmd.job_id} of tenant {cmd.tenant_id} (never submitted, or ended before the dedup window)"
        return [report(dependent, cmd.job_id, cmd.tenant_id, UNKNOWN, None, why, ctx.now)]
    ended = ENDED_AS.get(job.state)
    if ended is not None:
        result = job.result if ended == "completed" else None
        return [report(dependent, job.job_id, job.tenant_id, ended, result, error_of(job), ctx.now)]
    if dependent in job.dependents:
        return []
    return [Emit(job.job_id, job.tenant_id, m.DependentAdded(dependent))]


def report_dependency(body: m.ReportDependency, given: CommandInput, job: JobView | None,
                      ctx: DecideContext) -> Decision:
    """A dependency of a waiting job ended: recorded; then the job is released, cancelled, or waits on."""
    cmd, dependency = given.command, body.dependency_job_id
    if job is None or job.state is not JobState.WAITING or job.tenant_id != cmd.tenant_id:
        return []  # cancelled meanwhile (or already released by a failure under "run"): nothing waits for it
    policies = job.depends_on or {}
    if dependency not in policies or ctx.reported is not None:
        return []  # not one of its dependencies, or told already
    out: Decision = [Emit(job.job_id, job.tenant_id,
                          m.DependencyReported(dependency, body.status, body.result, body.error))]
    if body.status == UNKNOWN:
        reason = f"dependency_unknown: {body.error or f'no job {dependency}'}"
        return [*out, Emit(job.job_id, job.tenant_id, m.JobCancelled(reason, BY))]
    if body.status != "completed" and policies[dependency] != "run":
        reason = f"dependency_failed: job {dependency} is {body.status}" + (f" ({body.error})" if body.error else "")
        return [*out, Emit(job.job_id, job.tenant_id, m.JobCancelled(reason[:1000], BY))]
    if job.awaiting() > 1:
        return out
    return [*out, release(job, ctx.now)]


def release(job: JobView, now: int) -> Emit:
    """The event that ends a job's wait: queued now, or scheduled for its run_at if that is still ahead."""
    if job.due_at is not None and job.due_at > now:
        return Emit(job.job_id, job.tenant_id, m.JobScheduled(job.due_at))
    return Emit(job.job_id, job.tenant_id, m.JobQueued(RELEASED))


def notify_dependents(job: JobView | None, outcome: Decision, now: int) -> Decision:
    """Add a ReportDependency for each job waiting for ``job`` when ``outcome`` ends it (told once: a dead job's
    purge or replay tells nobody again)."""
    if job is None or not job.dependents or job.state in ENDED_AS:
        return outcome
    for emit in outcome:
        if not isinstance(emit, Emit) or emit.job_id != job.job_id:
            continue
        status = ENDING.get(type(emit.body))
        if status is None and isinstance(emit.body, m.JobSettled):
            status = "completed" if emit.body.outcome == "completed" else "partial"
        if status is not None:
            result = getattr(emit.body, "result", None) if status == "completed" else None
            error = _error(outcome, emit.body)
            return [*outcome, *(report(d, job.job_id, job.tenant_id, status, result, error, now)
                                for d in job.dependents)]
    return outcome


def report(dependent: str, dependency: str, tenant: str, status: str, result: bytes | None, error: str,
           now: int) -> Send:
    """The command that tells ``dependent`` how its dependency ended."""
    body = m.ReportDependency(dependency, status, result, error[:8000])
    return Send(m.Command(dependency_command_id(f"report:{status}", dependent, dependency), dependent, tenant, now,
                          body))


def error_of(job: JobView) -> str:
    """What went wrong with an ended job, as its dependents are told: its last error, or why it ended."""
    if job.errors:
        last = job.errors[-1]
        return f"{last.error_type}: {last.message}"[:8000]
    return job.dead_reason


def _error(outcome: Decision, body: m.EventBody) -> str:
    failures = [e.body for e in outcome if isinstance(e, Emit) and isinstance(e.body, m.JobFailed)]
    if failures:
        return f"{failures[-1].error_type}: {failures[-1].message}"
    if isinstance(body, m.JobDeadLettered):
        return body.reason
    if isinstance(body, m.JobCancelled):
        return body.reason
    return ""
