"""Typed commands and events: the Python face of the Avro contract in schemas/.

Each body class is named exactly like its Avro record, so the codec maps a union branch to
a class by name. Times are integer microseconds since the Unix epoch (UTC), the value
Avro's ``timestamp-micros`` carries on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class Payload:
    """A job's input or result: opaque bytes with their content type and schema version."""

    data: bytes
    content_type: str = "application/json"
    schema_name: str = ""
    schema_version: int = 1


# --- commands: what services ask for -------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubmitJob:
    """Create a job."""

    task_type: str
    payload: Payload
    priority: int = 5
    run_at: int | None = None
    idempotency_key: str | None = None
    lane: str | None = None
    max_attempts: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    scope: str | None = None
    parent_job_id: str | None = None
    depends_on: dict[str, str] = field(default_factory=dict)
    """Jobs (ids, same tenant) to wait for, each with what this job does if that one fails: cancel | run (v5)."""
    traceparent: str | None = None  # v5: the submitter's W3C trace context


@dataclass(frozen=True, slots=True)
class CancelJob:
    """Cancel a job that has not started (or is waiting for a retry)."""

    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class ReplayDeadJob:
    """Put a dead-lettered job back with a fresh attempt count."""

    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class ReportChild:
    """A child of a scoped job reached a final state (sent to the parent's partition)."""

    parent_job_id: str
    child_job_id: str
    child_tenant: str
    status: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class RescheduleJob:
    """Move a scheduled job to another due time."""

    run_at: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UpsertSchedule:
    """Create or replace a recurring schedule."""

    schedule_id: str
    tenant_id: str
    task_type: str
    cron: str
    payload: Payload
    timezone: str = "UTC"
    priority: int = 5
    enabled: bool = True
    misfire_policy: str = "skip"
    max_catch_up: int = 10
    dst_policy: str = "first"


@dataclass(frozen=True, slots=True)
class PauseSchedule:
    schedule_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ResumeSchedule:
    schedule_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RemoveSchedule:
    schedule_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ReportOccurrence:
    """An occurrence's job reached a final state (sent to the schedule's partition)."""

    schedule_id: str
    occurrence_at: int
    job_id: str
    status: str


@dataclass(frozen=True, slots=True)
class PauseTaskType:
    """Start no job of ``task_type`` in the command's partition until it is resumed."""

    task_type: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class ResumeTaskType:
    """Start jobs of a paused ``task_type`` again in the command's partition."""

    task_type: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class SetRateLimit:
    """Start jobs of ``task_type`` at most ``rate`` a second (across all partitions) in the command's partition."""

    task_type: str
    rate: float
    burst: int = 1
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class ClearRateLimit:
    """Remove ``task_type``'s rate limit in the command's partition."""

    task_type: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class ReprioritizeJob:
    """Give a waiting job another priority (0-9)."""

    priority: int
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class AwaitJob:
    """A job waits for the envelope's job (its dependency): sent by engines to the dependency's partition (v5)."""

    dependent_job_id: str


@dataclass(frozen=True, slots=True)
class ReportDependency:
    """A dependency of the envelope's job ended, or is unknown: sent by engines to the dependent's partition (v5)."""

    dependency_job_id: str
    status: str  # completed | dead | cancelled | partial | unknown
    result: bytes | None = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class ReportAttempt:
    """A remote worker's result for the envelope's job, fenced by the attempt's token (v6, docs/workers.md)."""

    attempt: int
    fencing_token: int
    outcome: str  # succeeded | failed | invalid | cancelled
    duration_us: int = 0
    result: bytes | None = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    retryable: bool = True
    worker: str = ""
    pool: str = ""
    records: bytes | None = None  # what the handler produced (ctx.produce), JSON (engine.runtime.remote.dispatch)


CommandBody: TypeAlias = (SubmitJob | CancelJob | ReplayDeadJob | ReportChild | RescheduleJob | UpsertSchedule
                          | PauseSchedule | ResumeSchedule | RemoveSchedule | ReportOccurrence | PauseTaskType
                          | ResumeTaskType | SetRateLimit | ClearRateLimit | ReprioritizeJob | AwaitJob
                          | ReportDependency | ReportAttempt)


@dataclass(frozen=True, slots=True)
class Command:
    """One record of ``<ns>.commands``."""

    command_id: str
    job_id: str
    tenant_id: str
    issued_at: int
    body: CommandBody
    correlation_id: str | None = None


# --- events: what happened --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnershipClaimed:
    partition: int
    owner: str


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    task_type: str
    payload: Payload
    priority: int
    lane: str
    max_attempts: int
    run_at: int | None = None
    idempotency_key: str | None = None
    command_offset: int = -1
    labels: dict[str, str] = field(default_factory=dict)
    scope: str | None = None
    parent_job_id: str | None = None
    depends_on: dict[str, str] = field(default_factory=dict)
    traceparent: str | None = None  # v5: the submitter's W3C trace context


@dataclass(frozen=True, slots=True)
class JobRejected:
    task_type: str
    reason: str
    detail: str = ""
    depth: int | None = None


@dataclass(frozen=True, slots=True)
class DuplicateSubmitted:
    idempotency_key: str
    command_id: str


@dataclass(frozen=True, slots=True)
class JobScheduled:
    due_at: int


@dataclass(frozen=True, slots=True)
class JobQueued:
    cause: str


@dataclass(frozen=True, slots=True)
class JobStarted:
    attempt: int
    due_at: int
    worker: str = ""
    fair_units: int = 0
    pool: str | None = None  # v7: the remote pool the attempt went to ("": an engine's process; None: before v7)


@dataclass(frozen=True, slots=True)
class JobSucceeded:
    attempt: int
    duration_us: int
    result: bytes | None = None


@dataclass(frozen=True, slots=True)
class JobFailed:
    attempt: int
    error_type: str
    message: str
    duration_us: int
    traceback: str = ""
    retryable: bool = True


@dataclass(frozen=True, slots=True)
class JobRetryScheduled:
    next_attempt: int
    due_at: int


@dataclass(frozen=True, slots=True)
class JobDeadLettered:
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class JobCancelled:
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class JobReplayed:
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class JobRequeued:
    previous_epoch: int
    attempt: int
    reason: str = ""  # v6: owner_stopped | handover | owner_lost | producer_reset (RequeueReason); "" before v6


@dataclass(frozen=True, slots=True)
class CommandRefused:
    command: str
    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class CommandQuarantined:
    topic: str
    partition: int
    offset: int
    error: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class BreakerOpened:
    task_type: str
    failures: int
    reopen_at: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class BreakerHalfOpened:
    task_type: str
    probe_job_id: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class BreakerClosed:
    task_type: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JobFannedOut:
    scope: str
    children: dict[str, str]  # tenant id -> child job id


@dataclass(frozen=True, slots=True)
class ChildReported:
    child_job_id: str
    child_tenant: str
    status: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class JobSettled:
    succeeded: int
    failed: int
    outcome: str


@dataclass(frozen=True, slots=True)
class JobRescheduled:
    due_at: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JobCancelRequested:
    attempt: int
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class JobProgressed:
    attempt: int
    value: float | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class TaskTypePaused:
    task_type: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class TaskTypeResumed:
    task_type: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class RateLimitSet:
    task_type: str
    rate: float
    burst: int
    interval_us: int
    partition_burst: int
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class RateLimitCleared:
    task_type: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class JobReprioritized:
    priority: int
    previous_priority: int
    lane: str
    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleUpserted:
    schedule_id: str
    tenant_id: str
    task_type: str
    cron: str
    payload: Payload
    timezone: str = "UTC"
    priority: int = 5
    enabled: bool = True
    misfire_policy: str = "skip"
    max_catch_up: int = 10
    dst_policy: str = "first"


@dataclass(frozen=True, slots=True)
class SchedulePaused:
    schedule_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleResumed:
    schedule_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleRemoved:
    schedule_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ScheduleArmed:
    schedule_id: str
    occurrence_at: int


@dataclass(frozen=True, slots=True)
class ScheduleFired:
    schedule_id: str
    occurrence_at: int
    job_id: str


@dataclass(frozen=True, slots=True)
class OccurrenceSkipped:
    schedule_id: str
    occurrence_at: int
    reason: str


@dataclass(frozen=True, slots=True)
class DependenciesAwaited:
    """The job waits until each of its ``count`` dependencies has ended (v5)."""

    count: int


@dataclass(frozen=True, slots=True)
class DependentAdded:
    """A job waits for this one, and is told how this one ends (v5)."""

    dependent_job_id: str


@dataclass(frozen=True, slots=True)
class DependencyReported:
    """One dependency of the job ended (or is unknown): its status, result and error (v5)."""

    dependency_job_id: str
    status: str
    result: bytes | None = None
    error: str = ""


EventBody: TypeAlias = (
    OwnershipClaimed | JobSubmitted | JobRejected | DuplicateSubmitted | JobScheduled | JobQueued
    | JobStarted | JobSucceeded | JobFailed | JobRetryScheduled | JobDeadLettered | JobCancelled
    | JobReplayed | JobRequeued | CommandRefused | CommandQuarantined | BreakerOpened | BreakerHalfOpened
    | BreakerClosed | JobFannedOut | ChildReported | JobSettled | JobRescheduled | ScheduleUpserted | SchedulePaused
    | ScheduleResumed | ScheduleRemoved | ScheduleArmed | ScheduleFired | OccurrenceSkipped | JobCancelRequested
    | JobProgressed | TaskTypePaused | TaskTypeResumed | RateLimitSet | RateLimitCleared | JobReprioritized
    | DependenciesAwaited | DependentAdded | DependencyReported
)


@dataclass(frozen=True, slots=True)
class Event:
    """One record of ``<ns>.events``: a body plus who wrote it, when, and under which epoch."""

    event_id: str
    job_id: str | None
    tenant_id: str | None
    epoch: int
    owner: str
    occurred_at: int
    body: EventBody
    causation_id: str | None = None
    correlation_id: str | None = None

    @property
    def type(self) -> str:
        """The body's Avro record name, e.g. ``JobSubmitted``."""
        return type(self.body).__name__


COMMAND_BODIES: dict[str, type] = {
    c.__name__: c
    for c in (SubmitJob, CancelJob, ReplayDeadJob, ReportChild, RescheduleJob, UpsertSchedule, PauseSchedule,
              ResumeSchedule, RemoveSchedule, ReportOccurrence, PauseTaskType, ResumeTaskType, SetRateLimit,
              ClearRateLimit, ReprioritizeJob, AwaitJob, ReportDependency, ReportAttempt)
}
EVENT_BODIES: dict[str, type] = {
    c.__name__: c
    for c in (
        OwnershipClaimed, JobSubmitted, JobRejected, DuplicateSubmitted, JobScheduled, JobQueued,
        JobStarted, JobSucceeded, JobFailed, JobRetryScheduled, JobDeadLettered, JobCancelled,
        JobReplayed, JobRequeued, CommandRefused, CommandQuarantined, BreakerOpened, BreakerHalfOpened,
        BreakerClosed, JobFannedOut, ChildReported, JobSettled, JobRescheduled, ScheduleUpserted,
        SchedulePaused, ScheduleResumed, ScheduleRemoved, ScheduleArmed, ScheduleFired, OccurrenceSkipped,
        JobCancelRequested, JobProgressed, TaskTypePaused, TaskTypeResumed, RateLimitSet, RateLimitCleared,
        JobReprioritized, DependenciesAwaited, DependentAdded, DependencyReported,
    )
}


# --- tenants: compacted configuration -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantConfig:
    """One record of the compacted ``<ns>.tenants`` topic: a tenant's weight, quota and product."""

    tenant_id: str
    updated_at: int
    weight: float = 1.0
    max_queued: int | None = None
    product: str | None = None
    public_key: bytes | None = None
    """The Ed25519 public key whose private key signs the tenant's commands (engine.contract.signing)."""
    next_public_key: bytes | None = None
    """A second key accepted too, while the tenant's services move to a new key pair."""

    @property
    def public_keys(self) -> tuple[bytes, ...]:
        """The keys a signature of the tenant may be by."""
        return tuple(k for k in (self.public_key, self.next_public_key) if k is not None)
