"""The owner's leases: which attempts are out with remote workers, and when each lapses.

A lease is granted when the attempt's ``JobStarted`` (and its dispatch) committed, renewed by every
worker heartbeat that names the attempt's fencing token, and released when the attempt's end is in
the log. One that lapses becomes a failed attempt (``lease_expired``) that the retry policy decides,
through the same results step as an in-process attempt: the log stays the truth, and a result the
worker sends later is refused by its token (``engine.domain.remote``). Leases live in memory only: a
new owner adopts the remote attempts it finds running with a fresh lease each (``loop/orphans.py``),
which its workers' heartbeats renew as before (the token names the epoch the attempt started at).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from engine.domain.fence import fencing_token
from engine.domain.remote import LEASE_EXPIRED
from engine.runtime.execution.verdicts import AttemptOutcome, AttemptOutcomeKind, RunRequest, RunResult


@dataclass(slots=True)
class Lease:
    """One attempt out with a worker of ``pool``, lapsing at ``deadline`` (wall-clock seconds)."""

    request: RunRequest
    pool: str
    token: int
    lease_s: float
    deadline: float
    granted: float


def token_of(request: RunRequest) -> int:
    """The fencing token of ``request``'s attempt."""
    return fencing_token(request.epoch, request.attempt, request.replays)


def expired_outcome(lease: Lease, now: float) -> AttemptOutcome:
    """The failure recorded for an attempt whose lease lapsed: retried by its policy."""
    message = (f"no heartbeat from a worker of pool {lease.pool} for {lease.lease_s:.3g}s: the attempt's lease "
               "lapsed; a result its worker sends later is refused (stale_token)")
    return AttemptOutcome(AttemptOutcomeKind.FAILED, None, LEASE_EXPIRED, message, "", int((now - lease.granted) * 1e6),
                   retryable=True)


class Leases:
    """The attempts this owner has out with remote workers, by job id."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._by_job: dict[str, Lease] = {}
        self._heap: list[tuple[float, str, int]] = []  # (deadline, job id, token); stale entries left lazily
        self._per_pool: Counter[str] = Counter()  # leases out per pool, per partition: asked every tick, so counted
        self._per_partition: Counter[int] = Counter()
        self.expiries: Counter[str] = Counter()  # per pool: leases that lapsed

    def grant(self, request: RunRequest, pool: str, lease_s: float, token: int | None = None) -> None:
        """``request``'s attempt is out with ``pool`` from now, for ``lease_s`` seconds unless renewed by ``token``
        (its own, unless adopted from an earlier owner: ``Remote.adopt``)."""
        now = self._clock()
        lease = Lease(request, pool, token_of(request) if token is None else token, lease_s, now + lease_s, now)
        self._drop(request.job_id)
        self._by_job[request.job_id] = lease
        self._per_pool[pool] += 1
        self._per_partition[request.partition] += 1
        heapq.heappush(self._heap, (lease.deadline, request.job_id, lease.token))

    def renew(self, job_id: str, token: int) -> bool:
        """A worker's heartbeat names ``job_id``'s attempt with ``token``: its lease runs on from now."""
        lease = self._by_job.get(job_id)
        if lease is None or lease.token != token:
            return False
        lease.deadline = self._clock() + lease.lease_s
        heapq.heappush(self._heap, (lease.deadline, job_id, token))
        return True

    def release(self, job_ids: Iterable[str]) -> None:
        """These jobs' attempts ended in the log (or their partition is gone): no lease any more."""
        for job_id in job_ids:
            self._drop(job_id)

    def _drop(self, job_id: str) -> Lease | None:
        lease = self._by_job.pop(job_id, None)
        if lease is not None:
            self._per_pool[lease.pool] -= 1
            self._per_partition[lease.request.partition] -= 1
        return lease

    def keep(self, partitions: set[int]) -> None:
        """Drop the leases of partitions not in ``partitions`` (their next owner adopts those attempts)."""
        if all(n in partitions for n, count in self._per_partition.items() if count):
            return
        self.release([j for j, lease in self._by_job.items() if lease.request.partition not in partitions])

    def expire(self) -> list[RunResult]:
        """The attempts whose lease lapsed, each once, as failures (``lease_expired``)."""
        now, out = self._clock(), []
        while self._heap and self._heap[0][0] <= now:
            deadline, job_id, token = heapq.heappop(self._heap)
            lease = self._by_job.get(job_id)
            if lease is None or lease.token != token or lease.deadline != deadline:
                continue  # renewed, released or granted again since
            self._drop(job_id)
            self.expiries[lease.pool] += 1
            out.append(RunResult(lease.request, expired_outcome(lease, now)))
        return out

    def next_deadline(self) -> float:
        """The soonest a lease may lapse (wall-clock seconds; infinity when none is out)."""
        while self._heap and self._by_job.get(self._heap[0][1]) is None:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else float("inf")

    def lease(self, job_id: str) -> Lease | None:
        """The lease of ``job_id``'s attempt out with a worker, if any."""
        return self._by_job.get(job_id)

    def request(self, job_id: str) -> RunRequest | None:
        """The attempt ``job_id`` has out, if any."""
        lease = self._by_job.get(job_id)
        return lease.request if lease is not None else None

    def holds(self, job_id: str) -> bool:
        """Whether ``job_id`` has an attempt out with a worker."""
        return job_id in self._by_job

    def in_flight(self, pool: str | None = None) -> int:
        """How many attempts are out (with ``pool``'s workers, or with any)."""
        return len(self._by_job) if pool is None else self._per_pool[pool]

    def requests(self) -> list[RunRequest]:
        """The attempts out, for the heartbeat and ``epochq workers``."""
        return [lease.request for lease in self._by_job.values()]
