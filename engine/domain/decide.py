"""What should happen next for one job: ``decide(job, input, ctx) -> [Emit | Send]``. Pure.

The engine loop calls decide with the job as the projection (plus its overlay of
not-yet-read-back events) knows it, writes the returned events, and acts only on
what it has written. This module routes each input to its rules, one module per concern:
``admission`` (SubmitJob), ``controls`` (an operator's commands on one job),
``children`` (scoped jobs), ``dependencies`` (jobs that wait for jobs), ``attempts`` (timers, starts,
results, orphans, progress), ``remote`` (a remote worker's result, fenced by its token).
"""

from __future__ import annotations

from engine.contract import messages as m
from engine.contract.validation import check_job_command
from engine.domain import admission, attempts, children, controls, dependencies, remote
from engine.domain.inputs import (
    AttemptFinished, CommandInput, DecideContext, Decision, Emit, HandBack, Input, Limits, ProgressReported,
    RequeueOrphan, RequeueReason, Send, StartAttempt, TaskPolicy, TimerFired, tenant_of,
)
from engine.domain.jobs import JobView
from engine.domain.switch import type_switch
from engine.errors import IllegalStateError, ValidationError

__all__ = [
    "AttemptFinished", "CommandInput", "DecideContext", "Decision", "Emit", "HandBack", "Input", "Limits",
    "ProgressReported", "RequeueOrphan", "RequeueReason", "Send", "StartAttempt", "TaskPolicy", "TimerFired", "decide",
    "told",
]


def decide(job: JobView | None, given: Input, ctx: DecideContext) -> Decision:
    """The events that ``given`` causes for ``job`` (None: the job does not exist yet), and the
    commands to send with them (``Send``: a scoped job's children, a child's report, a dependency's wait and its
    end told to its dependents)."""
    return told(job, _decide(given, job, ctx), ctx.now)


def told(job: JobView | None, outcome: Decision, now: int) -> Decision:
    """``outcome`` and the commands it sends to whoever waits for ``job`` to end: its scoped parent, its
    dependents. (The loop calls it too when it sets a poison input aside by dead-lettering the job.)"""
    return dependencies.notify_dependents(job, children.notify_parent(job, outcome, now), now)


@type_switch
def _decide(given: object, job: JobView | None, ctx: DecideContext) -> Decision:
    raise IllegalStateError(f"decide has no rule for {type(given).__name__}")


@_decide.register
def _(given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    body = given.command.body
    if not isinstance(body, m.SubmitJob):  # a SubmitJob's rules are its admission's
        try:
            check_job_command(given.command, ctx.now)
        except ValidationError as e:
            refusal = m.CommandRefused(type(body).__name__, job.state.value if job else "unknown", str(e))
            return [Emit(given.command.job_id, tenant_of(given.command, job), refusal)]
    return _command(body, given, job, ctx)


@type_switch
def _command(body: object, given: CommandInput, job: JobView | None, ctx: DecideContext) -> Decision:
    cmd = given.command
    refusal = m.CommandRefused(type(body).__name__, job.state.value if job else "unknown",
                               "this engine does not support the command")
    return [Emit(cmd.job_id, cmd.tenant_id, refusal)]


for _rule in (admission.submit, controls.cancel, controls.replay, controls.reschedule, controls.reprioritize,
              children.report_child, dependencies.await_job, dependencies.report_dependency, remote.reported):
    _command.register(_rule)
for _step in (attempts.timer_fired, attempts.start, attempts.finished, attempts.requeue_orphan, attempts.hand_back,
              attempts.progress):
    _decide.register(_step)
