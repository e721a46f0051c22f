"""What decide takes and returns: its inputs, its context, and the events and commands it asks for. Pure values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from engine.contract import messages as m
from engine.domain.jobs import JobView
from engine.domain.retry import RetryPolicy


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
    reported: tuple[str, bytes | None, str] | None = None
    """For a ReportDependency: what the job was told of that dependency already, if anything (engine-read)."""

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


@dataclass(frozen=True, slots=True)
class Send:
    """A command decide wants produced to ``<ns>.commands`` in the same transaction as its events."""

    command: m.Command


# --- inputs ------------------------------------------------------------------------------


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
    pool: str = ""  # the remote pool it is dispatched to ("": this engine's executor runs it; JobStarted.pool)


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


class RequeueReason(StrEnum):
    """Why a running attempt was given up and its job re-queued (``JobRequeued.reason``, v6).

    None of them is a failure of the handler: a re-queued attempt counts toward no ``max_attempts``."""

    OWNER_STOPPED = "owner_stopped"  # its owner shut down (SIGTERM) and the attempt outlived the grace period
    HANDOVER = "handover"  # a rebalance moved the partition and the attempt outlived the grace period
    OWNER_LOST = "owner_lost"  # its owner vanished (kill -9, a lost session, fenced): found by the next owner
    PRODUCER_RESET = "producer_reset"  # its owner's producer failed unfenced; the same process set it up again


@dataclass(frozen=True, slots=True)
class RequeueOrphan:
    """The job was found running under an older epoch when this owner claimed the partition: its owner was lost
    (``OWNER_LOST``, capped by ``max_lost``), or was this very process before its producer was replaced
    (``PRODUCER_RESET``: not a loss)."""

    job_id: str
    reason: RequeueReason = RequeueReason.OWNER_LOST


@dataclass(frozen=True, slots=True)
class HandBack:
    """This owner gives its partition back (``reason``: stopping or a rebalance) and the job's attempt, started
    under this owner's epoch, outlived the grace period: the next owner runs it again."""

    job_id: str
    reason: RequeueReason


@dataclass(frozen=True, slots=True)
class ProgressReported:
    """A running attempt's latest ``ctx.progress`` report, as the executor collected it."""

    job_id: str
    attempt: int
    value: float | None
    message: str


Input = CommandInput | TimerFired | StartAttempt | AttemptFinished | RequeueOrphan | HandBack | ProgressReported
Decision = list[Emit | Send]
"""What one input causes: events to write and commands to send, in order."""


def tenant_of(cmd: m.Command, job: JobView | None) -> str:
    """The tenant of the events a command causes: the job's, when the job exists."""
    return job.tenant_id if job is not None else cmd.tenant_id
