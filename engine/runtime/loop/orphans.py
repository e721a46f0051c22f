"""The orphans step: jobs left running by an older epoch are put back in their queues (at-least-once).

When a partition becomes active under a new epoch, the attempts an older epoch started may
never report (their owner is gone, or its results no longer count: ``engine.domain.fence``).
The step takes the draft and those jobs and stages a ``RequeueOrphan`` decision for each; a
job the decision raises for is set aside by the poison desk. It returns the events staged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.decide import DecideContext, RequeueOrphan
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.poison import PoisonDesk

log = logging.getLogger("epochq.lifecycle")


def orphaned(running: Iterable[tuple[str, int]], epoch: int) -> list[str]:
    """The jobs of ``running`` (job id, epoch that started it) started under an epoch older than ``epoch``. Pure."""
    return [job_id for job_id, started in running if fence.older(started, epoch)]


def requeue(draft: Draft, orphans: list[str], poison: PoisonDesk, now: int) -> list[m.Event]:
    """Decide ``RequeueOrphan`` for each of ``orphans`` into ``draft``; the events staged, in order."""
    ctx = DecideContext(now, draft.epoch)
    before = len(draft.staged.events)
    for job_id in orphans:
        error = draft.attempt(draft.decide, job_id, RequeueOrphan(job_id), ctx)
        if error is not None:
            poison.job(draft, job_id, error, ctx, "requeue")
    if orphans:
        log.info("partition %d: requeued %d jobs left running by epoch < %d", draft.number, len(orphans),
                 draft.epoch)
    return draft.staged.events[before:]
