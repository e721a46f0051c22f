"""A remote worker's result: counted only with the running attempt's fencing token, refused otherwise. Pure."""

from __future__ import annotations

from dataclasses import replace

from engine.contract import messages as m
from engine.domain.decide import AttemptFinished, CommandInput, ProgressReported, StartAttempt, TimerFired
from engine.domain.fence import fencing_token
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from engine.domain.remote import adopted, attempt_epoch, current_token
from tests.unit.domain.test_decide import CTX, queued_job, run
from tests.unit.factories import command


def running() -> JobView:
    job, _ = run(queued_job(), StartAttempt("job-1", "w"))
    assert job is not None and job.state is JobState.RUNNING and job.attempt == 1
    return job


def report(attempt: int, token: int, outcome: str = "succeeded", **fields: object) -> CommandInput:
    return CommandInput(command("job-1", m.ReportAttempt(attempt, token, outcome, 10, **fields)), 9)  # type: ignore[arg-type]


def test_a_result_with_the_running_attempt_s_token_is_decided_like_a_local_one() -> None:
    job = running()
    done, bodies = run(job, report(1, fencing_token(CTX.epoch, 1), result=b"{}"))
    assert bodies == [m.JobSucceeded(1, 10, b"{}")] and done is not None and done.state is JobState.COMPLETED
    failed, bodies = run(job, report(1, fencing_token(CTX.epoch, 1), "failed", error_type="IOError", message="x"))
    assert [type(b).__name__ for b in bodies] == ["JobFailed", "JobRetryScheduled"]


def test_a_result_with_another_token_is_refused_as_stale_and_changes_nothing() -> None:
    job = running()
    for attempt, token in ((1, fencing_token(CTX.epoch - 1, 1)), (1, fencing_token(CTX.epoch, 1, replays=1)),
                           (2, fencing_token(CTX.epoch, 2))):
        same, bodies = run(job, report(attempt, token))
        assert len(bodies) == 1 and isinstance(bodies[0], m.CommandRefused), bodies
        assert bodies[0].command == "ReportAttempt" and bodies[0].reason.startswith("stale_token"), bodies
        assert same == job


def test_a_second_result_for_an_attempt_that_ended_is_refused_so_it_ends_once() -> None:
    token = fencing_token(CTX.epoch, 1)
    done, _ = run(running(), report(1, token))
    again, bodies = run(done, report(1, token))
    assert isinstance(bodies[0], m.CommandRefused) and bodies[0].reason.startswith("stale_token") and again == done


def test_a_lapsed_lease_fails_the_attempt_and_the_retry_policy_decides() -> None:
    job, bodies = run(running(), AttemptFinished("job-1", 1, "failed", 5, error_type="lease_expired"))
    assert isinstance(bodies[0], m.JobFailed) and bodies[0].error_type == "lease_expired"
    assert isinstance(bodies[1], m.JobRetryScheduled) and job is not None and job.state is JobState.RETRYING
    late, bodies = run(job, report(1, fencing_token(CTX.epoch, 1)))
    assert isinstance(bodies[0], m.CommandRefused) and bodies[0].reason.startswith("stale_token") and late == job


def test_an_unknown_outcome_is_refused() -> None:
    job = running()
    _, bodies = run(job, report(1, fencing_token(CTX.epoch, 1), "exploded"))
    assert isinstance(bodies[0], m.CommandRefused) and "exploded" in bodies[0].reason


def test_an_attempt_keeps_the_epoch_it_started_at_whoever_writes_after_it() -> None:
    job = running()
    assert job.started_epoch == CTX.epoch
    later = replace(CTX, epoch=CTX.epoch + 1)  # a new owner adopted it and records its progress
    progressed, bodies = run(job, ProgressReported("job-1", 1, 0.5, "half"), later)
    assert bodies and progressed is not None and progressed.epoch == later.epoch
    assert progressed.started_epoch == CTX.epoch and current_token(progressed) == fencing_token(CTX.epoch, 1)


def test_the_new_owner_accepts_the_result_of_the_attempt_an_older_epoch_started() -> None:
    later = replace(CTX, epoch=CTX.epoch + 1)
    done, bodies = run(running(), report(1, fencing_token(CTX.epoch, 1), result=b"{}"), later)
    assert bodies == [m.JobSucceeded(1, 10, b"{}")] and done is not None and done.state is JobState.COMPLETED
    _, bodies = run(running(), report(1, fencing_token(later.epoch, 1)), later)  # the owner's epoch is no token
    assert isinstance(bodies[0], m.CommandRefused) and bodies[0].reason.startswith("stale_token")


def test_a_retry_after_adoption_gets_the_token_of_the_epoch_that_starts_it() -> None:
    later = replace(CTX, epoch=CTX.epoch + 1)
    failed, _ = run(running(), AttemptFinished("job-1", 1, "failed", 5, error_type="lease_expired"), later)
    assert failed is not None and failed.state is JobState.RETRYING
    queued, _ = run(failed, TimerFired("job-1"), replace(later, now=later.now + 60_000_000))
    again, _ = run(queued, StartAttempt("job-1", "w"), later)
    assert again is not None and (again.attempt, again.started_epoch) == (2, later.epoch)
    assert current_token(again) == fencing_token(later.epoch, 2)
    _, bodies = run(again, report(1, fencing_token(CTX.epoch, 1)), later)  # attempt 1's late result
    assert isinstance(bodies[0], m.CommandRefused) and bodies[0].reason.startswith("stale_token")


def test_only_a_running_attempt_of_a_remote_pool_is_adopted() -> None:
    job = running()
    assert adopted(job, "gpu")
    assert not adopted(job, None)  # it ran in an engine's process: that engine is gone, it is re-queued
    assert not adopted(None, "gpu") and not adopted(replace(job, state=JobState.QUEUED), "gpu")
    assert not adopted(replace(job, scope="global"), "gpu")  # a scoped parent runs nowhere


def test_a_record_folded_before_the_started_epoch_was_kept_uses_its_last_epoch() -> None:
    job = replace(running(), started_epoch=None, epoch=7)
    assert attempt_epoch(job) == 7 and current_token(job) == fencing_token(7, 1)


def test_the_start_records_the_pool_its_attempt_is_dispatched_to_and_the_job_keeps_it() -> None:
    started, bodies = run(queued_job(), StartAttempt("job-1", "w", 0, "gpu"))
    assert isinstance(bodies[0], m.JobStarted) and bodies[0].pool == "gpu"
    assert started is not None and started.pool == "gpu"
    local, bodies = run(queued_job(), StartAttempt("job-1", "w"))
    assert isinstance(bodies[0], m.JobStarted) and bodies[0].pool == "" and local is not None and local.pool == ""
