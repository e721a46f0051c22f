"""The job lifecycle: every state, every trigger, and the one table of allowed transitions."""

from __future__ import annotations

from enum import StrEnum

from engine.errors import InvalidTransitionError


class JobState(StrEnum):
    """Where a job is in its life. ``completed``, ``dead`` and ``cancelled`` are final
    (a dead job can still be replayed, or purged, i.e. cancelled, by an operator)."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    DEAD = "dead"
    CANCELLED = "cancelled"
    PARTIAL = "partial"  # a scoped job whose children settled, some of them not successfully
    WAITING = "waiting"  # submitted with dependencies: waits until each of them has ended


class Trigger(StrEnum):
    """What moves a job from one state to the next; each has exactly one event type."""

    SUBMIT = "submit"              # JobSubmitted
    SCHEDULE = "schedule"          # JobScheduled
    ENQUEUE = "enqueue"            # JobQueued(cause=submitted)
    DUE = "due"                    # JobQueued(cause=due|retry_due): a timer fired
    START = "start"                # JobStarted
    SUCCEED = "succeed"            # JobSucceeded
    FAIL = "fail"                  # JobFailed
    RETRY = "retry"                # JobRetryScheduled
    DEAD_LETTER = "dead_letter"    # JobDeadLettered
    CANCEL = "cancel"              # JobCancelled
    REPLAY = "replay"              # JobReplayed
    REQUEUE = "requeue"            # JobRequeued: running under an older epoch
    RESCHEDULE = "reschedule"      # JobRescheduled: a waiting job's due time moved
    FAN_OUT = "fan_out"            # JobFannedOut: a scoped job became one child per tenant
    CHILD_REPORT = "child_report"  # ChildReported: one child reached a final state
    SETTLE = "settle"              # JobSettled(outcome=completed): every child succeeded
    SETTLE_PARTIAL = "settle_partial"  # JobSettled(outcome=partial|failed): some children did not
    REQUEST_CANCEL = "request_cancel"  # JobCancelRequested: the running attempt is asked to stop
    PROGRESS = "progress"          # JobProgressed: the running attempt reported how far it got
    REPRIORITIZE = "reprioritize"  # JobReprioritized: a waiting job's priority changed
    AWAIT = "await"                # DependenciesAwaited: a job with dependencies waits for them
    ADD_DEPENDENT = "add_dependent"  # DependentAdded: a job now waits for this one
    DEPENDENCY_REPORT = "dependency_report"  # DependencyReported: one dependency ended (or is unknown)
    RELEASE = "release"            # JobQueued(cause=dependencies_met): every dependency ended as the job needs


S, T = JobState, Trigger
NEW = None

TRANSITIONS: dict[tuple[JobState | None, Trigger], JobState] = {
    (NEW, T.SUBMIT): S.PENDING,
    (S.PENDING, T.SCHEDULE): S.SCHEDULED,
    (S.PENDING, T.ENQUEUE): S.QUEUED,
    (S.SCHEDULED, T.DUE): S.QUEUED,
    (S.RETRYING, T.DUE): S.QUEUED,
    (S.QUEUED, T.START): S.RUNNING,
    (S.RUNNING, T.SUCCEED): S.COMPLETED,
    (S.RUNNING, T.FAIL): S.FAILED,
    (S.RUNNING, T.REQUEUE): S.QUEUED,
    (S.FAILED, T.RETRY): S.RETRYING,
    (S.FAILED, T.DEAD_LETTER): S.DEAD,
    (S.SCHEDULED, T.DEAD_LETTER): S.DEAD,  # set aside: the engine could not act on it (a poison record)
    (S.QUEUED, T.DEAD_LETTER): S.DEAD,
    (S.RETRYING, T.DEAD_LETTER): S.DEAD,
    (S.PENDING, T.CANCEL): S.CANCELLED,
    (S.SCHEDULED, T.CANCEL): S.CANCELLED,
    (S.QUEUED, T.CANCEL): S.CANCELLED,
    (S.RETRYING, T.CANCEL): S.CANCELLED,
    (S.RUNNING, T.REQUEST_CANCEL): S.RUNNING,
    (S.RUNNING, T.PROGRESS): S.RUNNING,
    (S.RUNNING, T.CANCEL): S.CANCELLED,  # the asked-to-stop attempt stopped (or was re-queued by a new owner)
    (S.FAILED, T.CANCEL): S.CANCELLED,  # it failed after the request: no retry
    (S.DEAD, T.REPLAY): S.QUEUED,
    (S.DEAD, T.CANCEL): S.CANCELLED,  # purged from the dead-letter queue: given up for good
    (S.SCHEDULED, T.RESCHEDULE): S.SCHEDULED,
    (S.RETRYING, T.RESCHEDULE): S.RETRYING,
    (S.QUEUED, T.REPRIORITIZE): S.QUEUED,
    (S.SCHEDULED, T.REPRIORITIZE): S.SCHEDULED,
    (S.RETRYING, T.REPRIORITIZE): S.RETRYING,
    (S.PENDING, T.FAN_OUT): S.RUNNING,
    (S.RUNNING, T.CHILD_REPORT): S.RUNNING,
    (S.PARTIAL, T.CHILD_REPORT): S.PARTIAL,
    (S.RUNNING, T.SETTLE): S.COMPLETED,
    (S.PARTIAL, T.SETTLE): S.COMPLETED,
    (S.RUNNING, T.SETTLE_PARTIAL): S.PARTIAL,
    (S.PENDING, T.AWAIT): S.WAITING,
    (S.WAITING, T.DEPENDENCY_REPORT): S.WAITING,
    (S.WAITING, T.RELEASE): S.QUEUED,
    (S.WAITING, T.SCHEDULE): S.SCHEDULED,  # released before its run_at
    (S.WAITING, T.CANCEL): S.CANCELLED,
    (S.WAITING, T.REPRIORITIZE): S.WAITING,
    **{(state, T.ADD_DEPENDENT): state for state in (S.WAITING, S.SCHEDULED, S.QUEUED, S.RUNNING, S.FAILED,
                                                      S.RETRYING)},  # every state a job has not ended in
}

FINAL_STATES = frozenset({S.COMPLETED, S.DEAD, S.CANCELLED, S.PARTIAL})


def next_state(state: JobState | None, trigger: Trigger) -> JobState:
    """The state after ``trigger`` fires in ``state``; refuses a transition the table lacks."""
    try:
        return TRANSITIONS[(state, trigger)]
    except KeyError:
        raise InvalidTransitionError(state.value if state else "new", trigger.value) from None


def allows(state: JobState | None, trigger: Trigger) -> bool:
    """Whether the table has a transition for ``trigger`` in ``state``."""
    return (state, trigger) in TRANSITIONS
