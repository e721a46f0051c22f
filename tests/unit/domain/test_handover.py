"""Re-queued attempts: why (JobRequeued.reason), and that none of them counts toward max_attempts. No broker."""

from __future__ import annotations

from dataclasses import replace

from engine.contract import messages as m
from engine.domain.decide import (
    AttemptFinished, CommandInput, DecideContext, HandBack, RequeueOrphan, RequeueReason, StartAttempt, TimerFired,
)
from engine.domain.jobs import JobView, evolve
from engine.domain.lifecycle import JobState
from tests.unit.factories import DECIDE_CTX as CTX
from tests.unit.factories import DECIDE_NOW as NOW
from tests.unit.factories import command, event, submit
from tests.unit.factories import decided as run


def running(max_attempts: int | None = None, ctx: DecideContext = CTX) -> JobView:
    job, _ = run(None, CommandInput(submit(max_attempts=max_attempts), 1), ctx)
    job, _ = run(job, StartAttempt("job-1"), ctx)
    assert job is not None and job.state is JobState.RUNNING
    return job


def handed_over(job: JobView, times: int, epoch: int = 1) -> JobView:
    """``job`` running at ``epoch``, handed back ``times`` times, each time started again by the next epoch."""
    for n in range(times):
        ctx = replace(CTX, epoch=epoch + n)
        job, bodies = run(job, HandBack("job-1", RequeueReason.HANDOVER), ctx)
        assert [type(b) for b in bodies] == [m.JobRequeued]
        job, _ = run(job, StartAttempt("job-1"), replace(CTX, epoch=epoch + n + 1))
    assert job is not None
    return job


def test_a_hand_back_requeues_the_owners_own_attempt_with_its_reason() -> None:
    job, bodies = run(running(), HandBack("job-1", RequeueReason.OWNER_STOPPED))
    assert bodies == [m.JobRequeued(1, 1, "owner_stopped")] and job is not None and job.state is JobState.QUEUED
    assert job.attempt == 1 and job.requeued == 1 and job.counted_attempts() == 0


def test_a_hand_back_leaves_an_older_epochs_attempt_to_the_orphans_rule_and_vice_versa() -> None:
    job = running()
    assert run(job, HandBack("job-1", RequeueReason.HANDOVER), replace(CTX, epoch=2))[1] == []
    assert run(job, RequeueOrphan("job-1"), CTX)[1] == []
    assert run(job, RequeueOrphan("job-1"), replace(CTX, epoch=2))[1] == [m.JobRequeued(1, 1, "owner_lost")]


def test_a_hand_back_of_a_job_not_running_changes_nothing() -> None:
    job, _ = run(None, CommandInput(submit(), 1))
    assert run(job, HandBack("job-1", RequeueReason.HANDOVER))[1] == []
    assert run(None, HandBack("job-1", RequeueReason.HANDOVER))[1] == []


def test_a_hand_back_of_an_attempt_asked_to_stop_cancels_it() -> None:
    job, _ = run(running(), CommandInput(command("job-1", m.CancelJob("stop it", "ops")), 2))
    job, bodies = run(job, HandBack("job-1", RequeueReason.OWNER_STOPPED))
    assert bodies == [m.JobCancelled("stop it", "ops")] and job is not None and job.state is JobState.CANCELLED


def test_with_max_attempts_1_a_job_handed_over_twice_still_gets_its_one_attempt() -> None:
    job = handed_over(running(max_attempts=1), 2)
    assert job.attempt == 3 and job.counted_attempts() == 1 <= job.max_attempts
    job, bodies = run(job, AttemptFinished("job-1", 3, "succeeded", 5), replace(CTX, epoch=3))
    assert [type(b) for b in bodies] == [m.JobSucceeded] and job is not None and job.state is JobState.COMPLETED


def test_a_failure_after_hand_overs_is_retried_as_the_first_failure_and_dead_letters_with_counted_attempts() -> None:
    ctx = replace(CTX, epoch=3)
    job = handed_over(running(max_attempts=2), 2)  # attempt 3 runs; attempts 1 and 2 were handed over
    job, bodies = run(job, AttemptFinished("job-1", 3, "failed", 5, error_type="IOError"), ctx)
    assert [type(b) for b in bodies] == [m.JobFailed, m.JobRetryScheduled]
    assert bodies[1] == m.JobRetryScheduled(4, NOW + 1_000_000)  # the first failure's delay, attempt number 4 next
    job, _ = run(replace(job, due_at=NOW), TimerFired("job-1"), ctx)  # type: ignore[arg-type]
    job, _ = run(job, StartAttempt("job-1"), ctx)
    job, bodies = run(job, AttemptFinished("job-1", 4, "failed", 5, error_type="IOError"), ctx)
    assert bodies[1] == m.JobDeadLettered("max_attempts_exhausted", 2)
    assert job is not None and job.state is JobState.DEAD and job.counted_attempts() == 2 == job.max_attempts


def test_hand_overs_never_bring_a_job_closer_to_its_dead_letter() -> None:
    """The law: hand-overs never bring a job closer to its dead-letter; failures do."""
    for handovers in range(4):
        job = handed_over(running(max_attempts=1), handovers)
        job, bodies = run(job, AttemptFinished("job-1", job.attempt, "failed", 5), replace(CTX, epoch=1 + handovers))
        assert bodies[1] == m.JobDeadLettered("max_attempts_exhausted", 1)  # one failure, one counted attempt


def test_a_replay_resets_the_requeues_with_the_attempts() -> None:
    job = handed_over(running(max_attempts=1), 1)
    job, _ = run(job, AttemptFinished("job-1", 2, "invalid", 5), replace(CTX, epoch=2))
    job, bodies = run(job, CommandInput(command("job-1", m.ReplayDeadJob("fixed", "ops")), 3), replace(CTX, epoch=2))
    assert job is not None and job.state is JobState.QUEUED and (job.attempt, job.requeued) == (0, 0)


def test_a_requeue_written_before_v6_has_no_reason_and_still_counts_as_no_attempt() -> None:
    job = running()
    job = evolve(job, event(m.JobRequeued(1, 1), epoch=2))
    assert job is not None and job.requeued == 1 and job.counted_attempts() == 0
