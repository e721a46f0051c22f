"""The orphans step: jobs left running are put back in their queues (at-least-once), saying why.

When a partition becomes active under a new epoch, the attempts an older epoch started may
never report (their owner is gone, or its results no longer count: ``engine.domain.fence``).
The step takes the draft and those jobs and stages a ``RequeueOrphan`` decision for each
(``JobRequeued reason=owner_lost``; a job lost more often than its task type's ``max_lost`` is
dead-lettered instead, ``owner_lost_repeatedly``; the attempts of an epoch this very process held
before it replaced a failed producer are ``producer_reset``: :func:`ours`). At a planned
hand-back the owner does it itself for the attempts of its own epoch that outlived the grace
period (:func:`hand_back`: ``owner_stopped`` or ``handover``), so the next owner starts them at
once and knows why (it returns the events staged: the partition closes only once they are
written). A job a decision raises for is set aside by the poison desk.

An attempt dispatched to a remote pool is neither: its worker runs on whoever owns the partition.
The new owner adopts it (:func:`adopt`, ``engine.domain.remote.adopted``) with a fresh lease from
the activation (:func:`adoption`: one full lease for the worker's heartbeats to reach it), and
its result counts by its token, which names the epoch it started at. Nothing is written for it; a
lease that lapses after the adoption fails it (``lease_expired``) as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.decide import DecideContext, HandBack, Input, RequeueOrphan, RequeueReason
from engine.domain.jobs import JobView
from engine.domain.lanes import Lane
from engine.domain.remote import adopted, current_token
from engine.runtime.execution.verdicts import RunRequest
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.poison import PoisonDesk

NO_POLICIES = DecideContext(0)
"""A base context with no task policies: every task type gets the default one (tests, tools)."""

log = logging.getLogger("epochq.lifecycle")


def orphaned(running: Iterable[tuple[str, int]], epoch: int) -> list[str]:
    """The jobs of ``running`` (job id, epoch that started it) started under an epoch older than ``epoch``. Pure."""
    return [job_id for job_id, started in running if fence.older(started, epoch)]


def ours(running: Iterable[tuple[str, int]], own: set[int]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """``running`` split: the jobs started under an epoch of another owner (or process), and those started under one
    of ``own``, the epochs this process held the partition at (its producer was replaced since). Pure."""
    pairs = list(running)
    return [p for p in pairs if p[1] not in own], [p for p in pairs if p[1] in own]


def adopt(running: Iterable[tuple[str, int]], job_of: Callable[[str], JobView | None],
          pool_of: Callable[[JobView], str | None]) -> tuple[list[tuple[str, int]], list[JobView]]:
    """``running`` split: the attempts that ran in an engine's process (re-queued or handed back as before), and the
    jobs whose attempts are out with a remote pool's workers (adopted: kept running). ``pool_of``: the pool a job's
    attempt was dispatched to (``engine.domain.remote.attempt_pool``: as its start recorded it, not as this owner's
    catalog says). Pure, given its lookups."""
    kept, adopted_jobs = [], []
    for job_id, epoch in running:
        job = job_of(job_id)
        if job is not None and adopted(job, pool_of(job)):
            adopted_jobs.append(job)
        else:
            kept.append((job_id, epoch))
    return kept, adopted_jobs


def adoption(partition: int, epoch: int, job: JobView, now: float) -> tuple[RunRequest, int]:
    """The attempt an adopted ``job`` has out, as the owner of ``partition`` at ``epoch`` leases it from ``now`` (s)
    (its lapse is a result of this owner's epoch, so it counts), and the token that lease is renewed by: the one of
    the epoch the attempt started at, which its worker holds. Pure."""
    request = RunRequest(partition=partition, epoch=epoch, job_id=job.job_id, tenant=job.tenant_id,
                         task_type=job.task_type, attempt=job.attempt, lane=Lane(job.lane), payload=job.payload,
                         idempotency_key=job.idempotency_key, deadline=now,  # not timed here: its lease decides
                         queued_at_us=job.queued_at or job.submitted_at, traceparent=job.traceparent,
                         replays=job.replays)
    return request, current_token(job)


def requeue(draft: Draft, orphans: list[str], poison: PoisonDesk, now: int,
            base: DecideContext = NO_POLICIES, reason: RequeueReason = RequeueReason.OWNER_LOST) -> None:
    """Decide ``RequeueOrphan`` for each of ``orphans`` into ``draft`` with ``base``'s task policies (a job lost more
    than its ``max_lost`` is dead-lettered instead); says in the log how many."""
    staged = _decide_each(draft, [(job_id, RequeueOrphan(job_id, reason)) for job_id in orphans], poison, now, base)
    dead = [e.job_id or "" for e in staged if isinstance(e.body, m.JobDeadLettered)]
    if len(orphans) > len(dead):
        log.info("partition %d: requeued %d jobs left running by epoch < %d (%s)", draft.number,
                 len(orphans) - len(dead), draft.epoch, reason.value)
    if dead:
        log.warning("partition %d: dead-lettered %d job(s) whose engine died more often than their max_lost allows "
                    "while running them (owner_lost_repeatedly): %s", draft.number, len(dead), ", ".join(dead[:5]))


def hand_back(draft: Draft, running: list[str], reason: RequeueReason, poison: PoisonDesk,
              now: int, base: DecideContext = NO_POLICIES) -> list[m.Event]:
    """Decide ``HandBack`` for each of ``running`` (jobs running in the partition) into ``draft``: the attempts this
    owner started go back to their queue with ``reason``; the events staged, in order."""
    staged = _decide_each(draft, [(job_id, HandBack(job_id, reason)) for job_id in running], poison, now, base)
    if staged:
        log.info("partition %d: handed back %d running job(s) past the grace period (%s)", draft.number,
                 len(staged), reason.value)
    return staged


def _decide_each(draft: Draft, inputs: list[tuple[str, Input]], poison: PoisonDesk, now: int,
                 base: DecideContext) -> list[m.Event]:
    ctx = draft.context(base, now)
    before = len(draft.staged.events)
    for job_id, given in inputs:
        error = draft.attempt(draft.decide, job_id, given, ctx)
        if error is not None:
            poison.job(draft, job_id, error, ctx, "requeue")
    return draft.staged.events[before:]
