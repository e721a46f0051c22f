"""Key layout of a partition store. Every view is a key prefix; numbers are zero-padded."""

from __future__ import annotations

import functools

JOB = b"j:"          # j:<job_id> -> job record
READY = b"r:"        # r:<lane>:<tenant>\x1f<9-priority>:<due_at>:<arrival>:<job_id> -> job_id
BACKLOG = b"b:"      # b:<lane>:<tenant> -> queued jobs of the tenant in the lane
LANE_DEPTH = b"n:"   # n:<lane> -> queued jobs in the lane
TYPE_DEPTH = b"Q:"   # Q:<task_type> -> queued jobs of the task type (remote pools' queued gauge)
VTIME = b"v:"        # v:<lane> -> the lane's system virtual time (fair queuing)
FINISH = b"f:"       # f:<lane>:<tenant> -> the tenant's virtual finish tag in the lane
SERVED = b"s:"       # s:<lane>:<tenant> -> jobs of the tenant started in the lane
BREAKER = b"k:"      # k:<task_type> -> the task type's circuit breaker
PAUSED = b"p:"       # p:<task_type> -> since, reason, requested_by (the task type is paused in this partition)
RATE = b"R:"         # R:<task_type> -> the task type's rate limit in this partition: its bucket, since, reason, by
DUE = b"d:"          # d:<due_at>:<job_id> -> job_id
BREAKER_DUE = b"w:"  # w:<reopen_at>:<task_type> -> task_type (an open breaker's cool-down ends)
RUNNING = b"u:"      # u:<job_id> -> epoch
DEAD = b"x:"         # x:<dead_at>:<job_id> -> job_id
IDEMPOTENCY = b"i:"  # i:<tenant>\x1f<key> -> job_id
HISTORY = b"h:"      # h:<job_id>\x00<offset> -> status of the event at that offset
TENANT_JOBS = b"t:"  # t:<tenant>\x1f<job_id> -> b"": jobs the tenant submitted, or sent a refused command about
CLAIMS = b"c:"       # c:<epoch> -> owner\x00offset
QUARANTINE = b"q:"   # q:<offset> -> error
EPOCH = b"m:epoch"   # the newest claim's epoch
ASIDE = b"m:aside:"  # m:aside:<kind> -> records the full fold did not apply (projections.views.aside)
ASIDE_KINDS = ("fenced_claim", "fenced", "ignored", "poison", "undecodable")
OWNER = b"m:owner"   # the newest claim's owner
# The catalog (projections.views.listing): <inv>: 16 digits, 10**16 - 1 - submitted_at (newest first)
LIST_STATUS = b"Ls:"       # Ls:<status>\x1f<inv>\x1f<job_id> -> b""
LIST_TENANT = b"Lt:"       # Lt:<tenant>\x1f<status>\x1f<inv>\x1f<job_id> -> b"" (Lt, Ly, Lz: no running jobs)
LIST_TYPE = b"Ly:"         # Ly:<task_type>\x1f<status>\x1f<inv>\x1f<job_id> -> b""
LIST_TENANT_TYPE = b"Lz:"  # Lz:<tenant>\x1f<task_type>\x1f<status>\x1f<inv>\x1f<job_id> -> b""
LIST_LABEL = b"Ll:"        # Ll:<name>\x1f<value>\x1f<inv>\x1f<job_id> -> b"" (a job's labels never change)
COUNT_STATUS = b"Cs:"      # Cs:<status> -> jobs in that status
COUNT_TENANT = b"Ct:"      # Ct:<tenant>\x1f<status> -> the tenant's jobs in that status
COUNT_TYPE = b"Cy:"        # Cy:<task_type>\x1f<status>
COUNT_TENANT_TYPE = b"Cz:"  # Cz:<tenant>\x1f<task_type>\x1f<status>


def num(value: int) -> bytes:
    """A non-negative integer padded so byte order equals numeric order."""
    return b"%020d" % value


def job_key(job_id: str) -> bytes:
    """The key of a job record."""
    return JOB + job_id.encode()


def ready_key(lane: str, tenant: str, priority: int, due_at: int, arrival: int, job_id: str) -> bytes:
    """A ready-queue entry: per lane and tenant, highest priority first, then due time, then arrival."""
    return b"%s%d:%020d:%020d:%s" % (ready_tenant_prefix(lane, tenant), 9 - priority, due_at, arrival,
                                     job_id.encode())


def ready_prefix(lane: str) -> bytes:
    """The prefix of one lane's ready queue (every tenant)."""
    return READY + lane.encode() + b":"


@functools.lru_cache(maxsize=65536)
def ready_tenant_prefix(lane: str, tenant: str) -> bytes:
    """The prefix of one tenant's ready queue in a lane."""
    return READY + lane.encode() + b":" + tenant.encode() + b"\x1f"


@functools.lru_cache(maxsize=65536)
def lane_tenant_key(prefix: bytes, lane: str, tenant: str) -> bytes:
    """A per-(lane, tenant) key under ``prefix`` (BACKLOG, FINISH, SERVED)."""
    return prefix + lane.encode() + b":" + tenant.encode()


def lane_key(prefix: bytes, lane: str) -> bytes:
    """A per-lane key under ``prefix`` (LANE_DEPTH, VTIME)."""
    return prefix + lane.encode()


def type_depth_key(task_type: str) -> bytes:
    """The queued-jobs counter of ``task_type``."""
    return TYPE_DEPTH + task_type.encode()


def suffix_after(prefix: bytes, key: bytes) -> str:
    """The text of ``key`` after ``prefix`` (a tenant or a task type)."""
    return key[len(prefix):].decode()


def due_key(due_at: int, job_id: str) -> bytes:
    """A due-time index entry."""
    return DUE + num(due_at) + b":" + job_id.encode()


def breaker_due_key(reopen_at: int, task_type: str) -> bytes:
    """A breaker cool-down's entry in the due-time index of breakers."""
    return BREAKER_DUE + num(reopen_at) + b":" + task_type.encode()


def running_key(job_id: str) -> bytes:
    """A running-jobs entry."""
    return RUNNING + job_id.encode()


def dead_key(dead_at: int, job_id: str) -> bytes:
    """A dead-letter queue entry, oldest first."""
    return DEAD + num(dead_at) + b":" + job_id.encode()


def idempotency_key(tenant: str, key: str) -> bytes:
    """The idempotency entry of (tenant, key)."""
    return IDEMPOTENCY + tenant.encode() + b"\x1f" + key.encode()


def history_prefix(job_id: str) -> bytes:
    """The prefix of one job's history entries."""
    return HISTORY + job_id.encode() + b"\x00"


def history_key(job_id: str, offset: int) -> bytes:
    """The history entry of the job's event at ``offset``."""
    return history_prefix(job_id) + num(offset)


def tenant_jobs_prefix(tenant: str) -> bytes:
    """The prefix of one tenant's entries in the tenant index."""
    return TENANT_JOBS + tenant.encode() + b"\x1f"


def tenant_job_key(tenant: str, job_id: str) -> bytes:
    """The tenant index's entry of ``job_id`` under ``tenant``."""
    return tenant_jobs_prefix(tenant) + job_id.encode()


def offset_of(key: bytes) -> int:
    """The offset a history or quarantine key ends with."""
    return int(key[-20:])
