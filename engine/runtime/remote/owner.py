"""The owner's side of remote pools: which task types go out, their dispatches, leases and free slots.

Made by the engine with its app and ``--no-execute``; with neither a ``pool=`` task nor
``--no-execute`` it holds nothing and reads nothing (the embedded default). For each start the
loop writes, a task type of a pool is dispatched in the start's transaction (:meth:`Remote.stage`),
leased once that committed (:meth:`Remote.grant`), renewed by its worker's heartbeats and released
when its end is written (:meth:`Remote.settle`), or failed as ``lease_expired`` (:meth:`Remote.expire`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from engine.app import App, TaskSpec
from engine.clock import now_us
from engine.config import Settings
from engine.contract import messages as m
from engine.domain.fence import fencing_token
from engine.domain.jobs import JobView
from engine.domain.remote import attempt_pool
from engine.runtime.execution.verdicts import RunRequest, RunResult
from engine.runtime.loop.effects import Output
from engine.runtime.execution.outputs import OutputRecord
from engine.runtime.remote.dispatch import CancelAttempt, Dispatch, dispatch_record, dispatch_topic, encode_cancel
from engine.runtime.remote.leases import Leases
from engine.runtime.remote.pools import PoolDirectory
from engine.runtime.topics import ensure_dispatch_topic
from projections.views.dependencies import read_reports

if TYPE_CHECKING:
    from engine.runtime.loop.draft import Staged
    from engine.runtime.loop.write import Written

DEFAULT_POOL = "default"
"""The pool of a task type without one, on an engine started with ``--no-execute``."""
ENDED = (m.JobSucceeded, m.JobFailed, m.JobCancelled, m.JobRequeued, m.JobDeadLettered)
"""Events after which a job's attempt is no longer out with a worker."""


class Remote:
    """The pools this engine dispatches to, the leases it holds, and what it knows of the workers."""

    def __init__(self, app: App, settings: Settings, no_execute: bool = False) -> None:
        self._app, self._namespace, self._no_execute = app, settings.namespace, no_execute
        self._pool_of: dict[str, str | None] = {}  # asked per job head by the dispatch step: worked out once per type
        self._terms_of: dict[str, tuple[float, float]] = {}
        self.pools = sorted({p for t in app.task_types if (p := self.pool_of(t)) is not None}
                            | ({DEFAULT_POOL} if no_execute else set()))
        self.leases = Leases()
        self.directory = PoolDirectory(settings) if self.pools else None
        for pool in self.pools:
            ensure_dispatch_topic(settings, dispatch_topic(settings.namespace, pool))

    @property
    def active(self) -> bool:
        """Whether any task type goes to a remote pool."""
        return bool(self.pools)

    def _spec(self, task_type: str) -> TaskSpec | None:
        try:
            return self._app.spec(task_type)
        except Exception:  # noqa: BLE001 - a type this app does not know
            return None

    def pool_of(self, task_type: str) -> str | None:
        """The pool that runs ``task_type`` (None: this engine's own executor)."""
        try:
            return self._pool_of[task_type]
        except KeyError:
            spec = self._spec(task_type)
            pool = spec.pool if spec is not None else None
            found = self._pool_of[task_type] = pool if pool is not None else (
                DEFAULT_POOL if self._no_execute else None)
            return found

    def lease_of(self, task_type: str) -> float:
        """Seconds an attempt of ``task_type`` lives without a heartbeat."""
        return self._terms(task_type)[0]

    def timeout_of(self, task_type: str) -> float:
        return self._terms(task_type)[1]

    def _terms(self, task_type: str) -> tuple[float, float]:
        """``task_type``'s lease and timeout, asked per dispatch: worked out once per type."""
        try:
            return self._terms_of[task_type]
        except KeyError:
            spec = self._spec(task_type)
            terms = self._terms_of[task_type] = (spec.lease, spec.timeout) if spec is not None else (30.0, 300.0)
            return terms

    def stage(self, staged: Staged, partition: int, batch: Any = None) -> None:
        """Stage the dispatch of each remote start in ``staged`` with it, in the same transaction (``batch``: the
        partition's write model, where a job that waited for jobs finds how each ended)."""
        if not self.pools:
            return
        at = now_us()
        for event, job in staged.starts:
            pool = self.pool_of(job.task_type)
            if pool is None:
                continue
            attempt = event.body.attempt  # type: ignore[union-attr]
            d = Dispatch(job.job_id, job.tenant_id, job.task_type, attempt, event.epoch, job.replays, partition,
                         fencing_token(event.epoch, attempt, job.replays), job.lane, job.payload, pool,
                         self.lease_of(job.task_type), self.timeout_of(job.task_type), at, job.idempotency_key,
                         job.traceparent, read_reports(batch, job) if job.depends_on and batch is not None else None)
            staged.outputs.append(Output(job.job_id, attempt, (dispatch_record(self._namespace, d),)))

    def stage_cancels(self, staged: Staged, grace_s: float) -> None:
        """Stage a cancel for each remote attempt ``staged`` asks to stop (``JobCancelRequested``), to the worker
        that runs it: on its pool's dispatch topic, keyed by the job id, in the same transaction."""
        if not self.leases.in_flight():
            return
        for event in staged.events:
            body = event.body
            if not isinstance(body, m.JobCancelRequested):
                continue
            lease = self.leases.lease(event.job_id or "")
            if lease is not None and lease.request.attempt == body.attempt:
                record = OutputRecord(dispatch_topic(self._namespace, lease.pool),
                                      encode_cancel(CancelAttempt(lease.request.job_id, body.attempt, lease.token,
                                                                  grace_s)), lease.request.job_id.encode())
                staged.outputs.append(Output(lease.request.job_id, body.attempt, (record,)))

    def grant(self, requests: list[RunRequest]) -> list[RunRequest]:
        """Lease the remote attempts among ``requests`` (their starts committed); the local ones, to run here."""
        if not self.pools:
            return requests
        local = []
        for request in requests:
            pool = self.pool_of(request.task_type)
            if pool is None:
                local.append(request)
            else:
                self.leases.grant(request, pool, self.lease_of(request.task_type))
        return local

    def attempt_pool(self, job: JobView) -> str | None:
        """The pool ``job``'s running attempt is out with, as its start recorded it (``domain/remote.attempt_pool``);
        None without pools here: no heartbeats are read, so no lease could be renewed (its attempt is re-queued)."""
        return attempt_pool(job, self.pool_of) if self.pools else None

    def adopt(self, adopted: list[tuple[RunRequest, int, str]]) -> None:
        """Lease from now the remote attempts a new owner adopted (``loop/orphans.py``), each renewed by the token its
        worker holds (the epoch it started at), with the pool its start recorded; one leased here already (a resync,
        same epoch) is left as it is."""
        for request, token, pool in adopted:
            if pool and not self.leases.holds(request.job_id):
                self.leases.grant(request, pool, self.lease_of(request.task_type), token)

    def settle(self, events: Iterable[m.Event]) -> None:
        """Release the leases of attempts whose end is staged in ``events`` (about to be written: their worker's slot
        is free; if the transaction aborts, the partition restores and the result, a command, is decided again)."""
        if self.leases.in_flight():
            self.leases.release(e.job_id for e in events if e.job_id is not None and isinstance(e.body, ENDED))

    def renew(self) -> list[tuple[RunRequest, float | None, str]]:
        """Renew the leases the workers' heartbeats named since the last call; their progress, to record."""
        if self.directory is None:
            return []
        progress = []
        for renewal in self.directory.take_renewals():
            job = renewal.job
            if self.leases.renew(job.job_id, job.token) and (job.progress is not None or job.message):
                request = self.leases.request(job.job_id)
                if request is not None:
                    progress.append((request, job.progress, job.message))
        return progress

    def expire(self) -> list[RunResult]:
        """The remote attempts whose lease lapsed, as failures (``lease_expired``)."""
        return self.leases.expire() if self.pools else []

    def free(self, owned: int, total: int) -> dict[str, int]:
        """Per pool, how many more attempts this owner may dispatch now: its share of the live workers' slots (its
        partitions' share of all), less what it has out."""
        if self.directory is None or not owned:
            return {}
        share = owned / max(1, total)
        return {pool: max(0, math.ceil(self.directory.slots(pool) * share) - self.leases.in_flight(pool))
                for pool in self.pools}

    def gauges(self) -> dict[str, tuple[int, int, int]]:
        """Per pool: its live workers' slots, the attempts out with them, the leases that lapsed so far."""
        if self.directory is None:
            return {}
        return {pool: (self.directory.slots(pool), self.leases.in_flight(pool), self.leases.expiries[pool])
                for pool in self.pools}

    def close(self) -> None:
        """Stop reading the heartbeats."""
        if self.directory is not None:
            self.directory.close()


def remote_refusals(written: Written) -> dict[tuple[str, int], str]:
    """The refused records of ``written`` (an aborted transaction) that no local result of it produced: a remote
    result's, decided again from its command as a failure (``Admission.refused_outputs``). Pure."""
    local = {(r.request.job_id, r.request.attempt) for r in written.staged.results}
    return {key: why for key, why in written.refused.items() if key not in local}

