"""Who starts next in a lane: weighted fair queuing across tenants, breakers respected.

Per lane and partition, each backlogged tenant offers its first startable job (its
*head*); the pure picker (``engine.domain.fairness.pick``) chooses the tenant with the
smallest virtual start tag. Only the heads are read, never a whole backlog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.contract import messages as m
from engine.domain.breaker import CLOSED, may_start
from engine.domain.decide import Emit, StartAttempt
from engine.domain.fairness import FairState, TenantHead, advance, pick
from engine.domain.lifecycle import JobState
from engine.runtime.owner import PartitionOwner
from projections.views import keys as k

if TYPE_CHECKING:
    from engine.runtime.loop import Engine

MAX_SKIPPED = 256  # blocked jobs (breaker open) passed over per tenant per tick


class LaneDispatch:
    """One dispatch round of one lane in one partition."""

    def __init__(self, engine: Engine, owner: PartitionOwner, lane: str):
        self.engine, self.owner, self.lane = engine, owner, lane
        self.breakers = engine.work.breakers
        self.ctx = owner.context(engine.base_ctx)
        self.positions: dict[str, int] = {}  # tenant -> index of its next entry in the ready view
        self.heads: dict[str, tuple[TenantHead, str]] = {}
        for tenant in owner.queued_tenants(lane):
            self.positions[tenant] = 0
            self._advance(tenant)

    def start(self, free: int) -> int:
        """Start up to ``free`` jobs, fairest tenant first; returns how many started."""
        started = 0
        while started < free and self.heads:
            state = self.owner.fair.get(self.lane) or FairState()
            heads = [head for head, _ in self.heads.values()]
            tenant = pick(state, heads) if self.engine.options.fair else oldest(heads)
            if tenant is None:
                break
            head, job_id = self.heads[tenant]
            units = head.units
            if self._claim_breaker(job_id) and \
                    self.owner.decide(job_id, StartAttempt(job_id, self.engine.owner_id, units), self.ctx):
                self.owner.fair[self.lane] = advance(state, tenant, units)
                started += 1
            self._advance(tenant)
        return started

    def _advance(self, tenant: str) -> None:
        """Move the tenant's head to its next startable job (or drop the tenant)."""
        self.heads.pop(tenant, None)
        prefix_len = len(k.ready_tenant_prefix(self.lane, tenant))
        ready, position = self.owner.ready, self.positions[tenant]
        for _ in range(MAX_SKIPPED):
            entry = ready.entry(self.lane, tenant, position)
            position += 1
            if entry is None:
                break
            key, job_id = entry
            if self._startable(job_id):
                self.heads[tenant] = (self._head(tenant, key[prefix_len:]), job_id)
                break
        self.positions[tenant] = position

    def _head(self, tenant: str, order: bytes) -> TenantHead:
        inverse, due, arrival, _ = order.split(b":", 3)
        weight = self.engine.tenants.weight(tenant)
        return TenantHead(tenant, weight, 9 - int(inverse), int(due), int(arrival))

    def _startable(self, job_id: str) -> bool:
        job = self.owner.job(job_id)
        if job is None or job.state is not JobState.QUEUED:
            return False
        policy = self.engine.breaker_policy(job.task_type)
        return policy is None or may_start(self.breakers.get(job.task_type, CLOSED), policy, self.ctx.now).allowed

    def _claim_breaker(self, job_id: str) -> bool:
        """Take the start through the task type's breaker: a half-open breaker's probe is this job."""
        job = self.owner.job(job_id)
        policy = self.engine.breaker_policy(job.task_type) if job else None
        if job is None or policy is None:
            return True
        decision = may_start(self.breakers.get(job.task_type, CLOSED), policy, self.ctx.now)
        if not decision.allowed:
            return False
        self.breakers[job.task_type] = decision.state
        if decision.transition is not None:
            body = m.BreakerHalfOpened(job.task_type, job_id, decision.transition.reason)
            self.owner.stage(Emit(None, None, body), self.ctx.now)
        return True


def oldest(heads: list[TenantHead]) -> str | None:
    """FIFO across tenants (for comparison): the head that has been due longest."""
    return min(heads, key=lambda h: (h.due_at, h.arrival, h.tenant)).tenant if heads else None


def rotate(items: list[PartitionOwner], turn: int) -> list[PartitionOwner]:
    """``items`` starting at ``turn``: partitions take turns at the free slots."""
    if not items:
        return items
    n = turn % len(items)
    return items[n:] + items[:n]

