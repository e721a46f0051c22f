"""Who starts next: free slots dealt to partitions in turn, and within a lane fairly across tenants.

Per lane and partition, each backlogged tenant offers its first startable job (its
*head*); the pure picker (``engine.domain.fairness.pick``) chooses the tenant with the
smallest virtual start tag. Only the heads are read, never a whole backlog. A queued job
whose head cannot even be worked out (a poison record) is set aside, not retried forever.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from engine.domain.decide import DecideContext, Emit, StartAttempt
from engine.domain.fairness import FairState, TenantHead, advance, pick, service_units
from engine.domain.lifecycle import JobState
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.timers import SetAside
from projections.views.pauses import is_paused
from projections.views.ratelimits import read_limit

if TYPE_CHECKING:
    from engine.runtime.execution.verdicts import RunResult
    from engine.runtime.loop.draft import Staged

T = TypeVar("T")

MAX_SKIPPED = 256  # blocked jobs (breaker open, paused, rate-limited) passed over per tenant per tick


class TokenWake:
    """When the loop must wake for a rate-limited job that waits for its bucket (µs; None: no such job)."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: int | None = None

    def note(self, at: int) -> None:
        """A job waits until ``at``."""
        if self.at is None or at < self.at:
            self.at = at

    def take(self) -> int | None:
        """The earliest time noted since the last take, once."""
        at, self.at = self.at, None
        return at


@dataclass(frozen=True, slots=True)
class Dispatcher:
    """What starting a job needs besides the partition: breakers, tenants' weights, the policy."""

    board: BreakerBoard
    weight: Callable[[str], float]
    worker: str
    set_aside: SetAside
    fair: bool = True
    wake: TokenWake = field(default_factory=TokenWake)
    pool_of: Callable[[str], str | None] = field(default=lambda task_type: None)
    """The remote pool that runs a task type (None: the engine's own executor; engine.runtime.remote)."""

    def rate_allows(self, draft: Draft, task_type: str, now: int) -> bool:
        """Whether the task type's rate limit in ``draft``'s partition lets one of its jobs start at ``now``.

        When it does not, the loop is told to wake when the bucket's next token is due."""
        record = read_limit(draft.batch, task_type)
        if record is None or record.bucket.allows(now):
            return True
        self.wake.note(record.bucket.ready_at())
        return False

    def deal(self, lane: str, free: int, drafts: list[Draft], ctx_of: Callable[[Draft], DecideContext],
             pool: str | None = None) -> int:
        """Hand ``free`` slots of ``lane`` (of ``pool``'s workers; None: of this engine) to the partitions' drafts one
        at a time, in turn; how many started."""
        rounds = [LaneRound(self, d, lane, ctx_of(d), pool) for d in drafts]
        started = 0
        while started < free and rounds:
            still = []
            for round_ in rounds:
                if started < free and round_.start_one():
                    started += 1
                    still.append(round_)
            rounds = still
        return started


class LaneRound:
    """One dispatch round of one lane in one partition (its draft)."""

    def __init__(self, dispatcher: Dispatcher, draft: Draft, lane: str, ctx: DecideContext, pool: str | None = None):
        self.d, self.draft, self.lane, self.ctx, self.pool = dispatcher, draft, lane, ctx, pool
        self.positions: dict[str, bytes] = {}  # tenant -> key of the last entry looked at (the view may change)
        self.heads: dict[str, tuple[TenantHead, str]] = {}
        self.free_types: set[str] = set()  # neither paused nor rate-limited here (no command changes it in a round)
        for tenant in list(draft.ready.backlogged(lane)):
            self.positions[tenant] = b""
            self._advance(tenant)

    def start_one(self) -> bool:
        """Start the fairest tenant's head; whether one started (False: nothing left to start)."""
        while self.heads:
            state = self.draft.fair.get(self.lane) or FairState()
            heads = [head for head, _ in self.heads.values()]
            tenant = pick(state, heads) if self.d.fair else oldest(heads)
            if tenant is None:
                return False
            head, job_id = self.heads[tenant]
            started = self._start(job_id, head.units)
            if started:
                self.draft.fair[self.lane] = advance(state, tenant, head.units)
            self._advance(tenant)
            if started:
                return True
        return False

    def _start(self, job_id: str, units: int) -> bool:
        before = len(self.draft.staged.starts)
        error = self.draft.attempt(self._take, job_id, units)
        if error is not None:
            self.d.set_aside(self.draft, job_id, error, self.ctx, "dispatch")
        return len(self.draft.staged.starts) > before

    def _take(self, job_id: str, units: int) -> None:
        job = self.draft.job(job_id)
        if job is None or (job.task_type not in self.free_types
                           and not self.d.rate_allows(self.draft, job.task_type, self.ctx.now)):
            return  # the bucket emptied since the job became its tenant's head: it waits, in its place
        allowed, half_open = self.d.board.take_start(job.task_type, job_id, self.ctx.now)
        if not allowed:
            return
        if half_open is not None:
            self.draft.stage(Emit(None, None, half_open), self.ctx.now)
        self.draft.decide(job_id, StartAttempt(job_id, self.d.worker, units, self.pool or ""), self.ctx)

    def _advance(self, tenant: str) -> None:
        """Move the tenant's head to its next startable job (or drop the tenant)."""
        self.heads.pop(tenant, None)
        ready, position = self.draft.ready, self.positions[tenant]
        for _ in range(MAX_SKIPPED):
            entry = ready.entry_after(self.lane, tenant, position)
            if entry is None:
                break
            key, job_id = entry
            position = key
            head = self._head_of(tenant, ready.order_of(self.lane, tenant, key), job_id)
            if head is not None:
                self.heads[tenant] = (head, job_id)
                break
        self.positions[tenant] = position

    def _held(self, task_type: str) -> bool:
        """Whether a pause or the rate limit holds ``task_type`` here now (read once per type and round while
        neither does, not once per job)."""
        if task_type in self.free_types:
            return False
        batch = self.draft.batch
        if is_paused(batch, task_type):
            return True
        if read_limit(batch, task_type) is None:
            self.free_types.add(task_type)
            return False
        return not self.d.rate_allows(self.draft, task_type, self.ctx.now)

    def _head_of(self, tenant: str, order: bytes, job_id: str) -> TenantHead | None:
        """The job as its tenant's head, if it can start now; a job whose head raises is set aside."""
        try:
            job = self.draft.job(job_id)
            if job is None or job.state is not JobState.QUEUED or self.d.pool_of(job.task_type) != self.pool \
                    or not self.d.board.startable(job.task_type, self.ctx.now) or self._held(job.task_type):
                return None
            weight = self.d.weight(tenant)
            return TenantHead.from_order(tenant, weight, units_of(weight), order)
        except Exception as e:  # noqa: BLE001 - a record no head can be made of must not stop dispatch
            self.d.set_aside(self.draft, job_id, e, self.ctx, "dispatch")
            return None


@functools.lru_cache(maxsize=1024)
def units_of(weight: float) -> int:
    """The virtual time one job costs a tenant of ``weight`` (worked out once per weight)."""
    return service_units(weight)


def oldest(heads: list[TenantHead]) -> str | None:
    """FIFO across tenants (for comparison): the head that has been due longest."""
    return min(heads, key=lambda h: (h.due_at, h.arrival, h.tenant)).tenant if heads else None


def rotate(items: list[T], turn: int) -> list[T]:
    """``items`` starting at ``turn``: partitions take turns at the free slots."""
    if not items:
        return items
    n = turn % len(items)
    return items[n:] + items[:n]


def slots_spoken_for(staged: Iterable[Staged], waiting: Iterable[list[RunResult]],
                     pool_of: Callable[[str], str | None] = lambda task_type: None) -> Counter[str]:
    """Per lane, the slots the executor counts free that are spoken for: starts ``staged`` (drafts' and
    transactions' under way), and handlers that returned whose results are ``waiting`` for their partition's
    transaction (a slot stays taken until its result is recorded, or a breaker would open one start too late).
    Per remote pool (keyed ``pool:<name>``), the starts staged for its workers and not yet leased."""
    taken: Counter[str] = Counter()
    for s in staged:
        for _, job in s.starts:
            pool = pool_of(job.task_type)
            taken[job.lane if pool is None else f"pool:{pool}"] += 1
    taken.update(result.request.lane.value for results in waiting for result in results
                 if pool_of(result.request.task_type) is None)
    return taken
