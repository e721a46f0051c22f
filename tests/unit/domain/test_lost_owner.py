"""A job whose engine dies while running it (JobRequeued reason=owner_lost) is re-queued at most max_lost times; the
next loss dead-letters it (owner_lost_repeatedly). Planned hand-overs never count. No broker."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.contract import messages as m
from engine.domain.decide import (
    CommandInput, DecideContext, HandBack, RequeueOrphan, RequeueReason, StartAttempt, TaskPolicy, decide,
)
from engine.domain.jobs import JobView, evolve
from engine.domain.lifecycle import JobState
from engine.domain.retry import RetryPolicy, lost_too_often
from tests.unit.factories import command, event, submit

NOW = 10_000_000
CTX = DecideContext(now=NOW, epoch=1, tasks={"email.send": TaskPolicy(RetryPolicy(3, 1.0, 10.0, 0.0, max_lost=1))})


def run(job: JobView | None, given: object, ctx: DecideContext = CTX) -> tuple[JobView | None, list[m.EventBody]]:
    bodies = [e.body for e in decide(job, given, ctx)]  # type: ignore[arg-type]
    for body in bodies:
        job = evolve(job, event(body, "job-1", epoch=ctx.epoch, at=ctx.now))
    return job, bodies


def running(ctx: DecideContext = CTX) -> JobView:
    job, _ = run(None, CommandInput(submit(), 1), ctx)
    job, _ = run(job, StartAttempt("job-1"), ctx)
    assert job is not None and job.state is JobState.RUNNING
    return job


def lost(job: JobView, epoch: int, ctx: DecideContext = CTX) -> tuple[JobView, list[m.EventBody]]:
    """``job``'s owner (an epoch before ``epoch``) is lost: the owner at ``epoch`` finds it (and starts it again if it
    was re-queued)."""
    here = replace(ctx, epoch=epoch)
    found, bodies = run(job, RequeueOrphan("job-1"), here)
    assert found is not None
    if found.state is JobState.QUEUED:
        found, _ = run(found, StartAttempt("job-1"), here)
    assert found is not None
    return found, bodies


def test_a_job_lost_once_more_than_max_lost_is_dead_lettered_with_the_reason() -> None:
    job, bodies = lost(running(), 2)
    assert bodies == [m.JobRequeued(1, 1, "owner_lost")] and job.lost == 1 and job.state is JobState.RUNNING
    job, bodies = lost(job, 3)
    assert bodies == [m.JobFailed(2, "OwnerLost", "its engine died 2 times while running it (max_lost=1)", 0, "",
                                  False), m.JobDeadLettered("owner_lost_repeatedly", 1)]
    assert job.state is JobState.DEAD and job.dead_reason == "owner_lost_repeatedly"
    assert job.counted_attempts() == 1 and job.errors[-1].error_type == "OwnerLost"


def test_max_lost_0_dead_letters_at_the_first_loss() -> None:
    ctx = replace(CTX, tasks={"email.send": TaskPolicy(RetryPolicy(max_lost=0))})
    job, bodies = lost(running(ctx), 2, ctx)
    assert bodies[-1] == m.JobDeadLettered("owner_lost_repeatedly", 1) and job.state is JobState.DEAD
    assert "died 1 time while" in bodies[0].message  # type: ignore[union-attr]


def test_the_default_policy_requeues_three_losses_and_dead_letters_the_fourth() -> None:
    ctx = DecideContext(now=NOW, epoch=1)
    job = running(ctx)
    for epoch in (2, 3, 4):
        job, bodies = lost(job, epoch, ctx)
        assert [type(b) for b in bodies] == [m.JobRequeued]
    job, bodies = lost(job, 5, ctx)
    assert job.state is JobState.DEAD and bodies[-1] == m.JobDeadLettered("owner_lost_repeatedly", 1)


def test_planned_hand_overs_and_requeues_before_v6_never_count_as_losses() -> None:
    job = running()
    for epoch in (1, 2, 3):
        job, _ = run(job, HandBack("job-1", RequeueReason.HANDOVER if epoch % 2 else RequeueReason.OWNER_STOPPED),
                     replace(CTX, epoch=epoch))  # type: ignore[assignment]
        job, _ = run(job, StartAttempt("job-1"), replace(CTX, epoch=epoch + 1))  # type: ignore[assignment]
    job = evolve(job, event(m.JobRequeued(4, job.attempt), epoch=5))  # a re-queue written before v6: no reason
    job, _ = run(job, StartAttempt("job-1"), replace(CTX, epoch=5))  # type: ignore[assignment]
    assert job.requeued == 4 and job.lost == 0
    job, bodies = lost(job, 6)
    assert [type(b) for b in bodies] == [m.JobRequeued]


def test_a_lost_job_asked_to_stop_is_cancelled_not_dead_lettered() -> None:
    job, _ = lost(running(), 2)
    job, _ = run(job, CommandInput(command("job-1", m.CancelJob("stop it", "ops")), 2), replace(CTX, epoch=2))  # type: ignore[assignment]
    job, bodies = lost(job, 3)
    assert bodies == [m.JobCancelled("stop it", "ops")] and job.state is JobState.CANCELLED


def test_a_replay_gives_the_job_its_losses_back() -> None:
    job, _ = lost(running(), 2)
    job, _ = lost(job, 3)
    job, _ = run(job, CommandInput(command("job-1", m.ReplayDeadJob("fixed", "ops")), 3), replace(CTX, epoch=3))  # type: ignore[assignment]
    assert job.state is JobState.QUEUED and job.lost == 0
    job, _ = run(job, StartAttempt("job-1"), replace(CTX, epoch=3))  # type: ignore[assignment]
    assert [type(b) for b in lost(job, 4)[1]] == [m.JobRequeued]


def test_lost_too_often_allows_max_lost_requeues() -> None:
    assert [lost_too_often(2, n) for n in range(4)] == [False, False, True, True]
    assert lost_too_often(0, 0)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_max_lost_must_be_a_count(bad: object) -> None:
    with pytest.raises(ValueError, match="max_lost must be an integer >= 0"):
        RetryPolicy(max_lost=bad)  # type: ignore[arg-type]


def test_a_producer_reset_of_the_same_process_requeues_without_counting_a_loss() -> None:
    job = running()
    for epoch in (2, 3, 4):  # the owner's producer replaced three times while the job ran: not a loss
        job, bodies = run(job, RequeueOrphan("job-1", RequeueReason.PRODUCER_RESET), replace(CTX, epoch=epoch))  # type: ignore[assignment]
        assert bodies == [m.JobRequeued(epoch - 1, epoch - 1, "producer_reset")] and job.lost == 0
        job, _ = run(job, StartAttempt("job-1"), replace(CTX, epoch=epoch))  # type: ignore[assignment]
    assert [type(b) for b in lost(job, 5)[1]] == [m.JobRequeued]  # max_lost=1: the first real loss is re-queued
