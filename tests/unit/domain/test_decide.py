"""decide: admission, timers, attempts, retries, dead letters, refusals. No broker, no clock."""

from __future__ import annotations

from dataclasses import replace

from engine.contract import messages as m
from engine.contract.ids import job_id_for_key
from engine.domain.decide import (
    AttemptFinished, CommandInput, Emit, ProgressReported, RequeueOrphan, Send, StartAttempt,
    TimerFired, decide,
)
from engine.domain.jobs import JobView, evolve
from engine.domain.lifecycle import JobState
from tests.unit.factories import DECIDE_CTX as CTX
from tests.unit.factories import DECIDE_NOW as NOW
from tests.unit.factories import command, event, submit
from tests.unit.factories import decided as run


def queued_job() -> JobView:
    job, _ = run(None, CommandInput(submit(), 7))
    assert job is not None
    return job


def test_submit_is_accepted_and_queued() -> None:
    job, bodies = run(None, CommandInput(submit(priority=9), 7))
    assert [type(b).__name__ for b in bodies] == ["JobSubmitted", "JobQueued"]
    assert bodies[0].lane == "HIGH" and bodies[0].max_attempts == 3 and bodies[0].command_offset == 7
    assert job is not None and job.state is JobState.QUEUED


def test_future_submit_is_scheduled_until_its_timer_fires() -> None:
    job, bodies = run(None, CommandInput(submit(run_at=NOW + 5), 1))
    assert job.state is JobState.SCHEDULED and bodies[1] == m.JobScheduled(NOW + 5)
    assert run(job, TimerFired("job-1"))[1] == []
    later = replace(CTX, now=NOW + 5)
    job, bodies = run(job, TimerFired("job-1"), later)
    assert bodies == [m.JobQueued("due")] and job.state is JobState.QUEUED


def test_admission_rejects_with_reason() -> None:
    cases = {
        "unknown_task_type": submit(task_type="nope"),
        "payload_too_large": submit(data=b"x" * (CTX.max_payload_bytes + 1)),
        "invalid_priority": submit(priority=12),
        "invalid_lane": submit(lane="DEAD"),
        "invalid_tenant": submit(tenant=""),
        "invalid_run_at": submit(run_at=-1),
        "invalid_job_id": submit(""),
    }
    for reason, cmd in cases.items():
        job, bodies = run(None, CommandInput(cmd, 1))
        assert job is None
        assert isinstance(bodies[0], m.JobRejected) and bodies[0].reason == reason, bodies


def test_a_rejection_detail_names_the_field() -> None:
    (rejected,) = decide(None, CommandInput(submit(run_at=-1_000_000), 1), CTX)
    assert rejected.body.detail.startswith("run_at: 1969-12-31T23:59:59Z (-1000000 µs) is before 1970")


def test_a_past_run_at_means_now() -> None:
    job, bodies = run(None, CommandInput(submit(run_at=1), 1))
    assert bodies[1] == m.JobQueued("submitted") and job is not None and job.state is JobState.QUEUED


def test_other_commands_with_a_bad_field_are_refused_naming_it() -> None:
    job = queued_job()
    for cmd, field in ((command("job-1", m.RescheduleJob(-5)), "run_at"), (command("", m.CancelJob()), "job_id"),
                       (command("job-1", m.CancelJob(), tenant="a\tb"), "tenant_id")):
        (refused,) = decide(job, CommandInput(cmd, 2), CTX)
        assert isinstance(refused.body, m.CommandRefused) and refused.body.reason.startswith(f"{field}: ")


def test_duplicate_idempotency_key_creates_no_second_job() -> None:
    derived = job_id_for_key("acme", "k1")
    job, _ = run(None, CommandInput(submit(derived, key="k1"), 1))
    again, bodies = run(job, CommandInput(submit(derived, key="k1"), 2))
    assert isinstance(bodies[0], m.DuplicateSubmitted) and again == job


def test_a_key_with_an_id_not_derived_from_it_is_rejected() -> None:
    job, bodies = run(None, CommandInput(submit("job-1", key="k1"), 1))
    assert job is None and bodies[0].reason == "invalid_job_id"
    assert bodies[0].detail.startswith("job_id: ") and job_id_for_key("acme", "k1") in bodies[0].detail


def test_failures_retry_with_growing_delays_then_dead_letter() -> None:
    job, delays = queued_job(), []
    for attempt in (1, 2, 3):
        job, (started,) = run(job, StartAttempt("job-1"))
        assert started.attempt == attempt
        job, bodies = run(job, AttemptFinished("job-1", attempt, "failed", 5, error_type="IOError", message="boom"))
        if attempt < 3:
            delays.append(bodies[1].due_at - NOW)
            job = replace(job, due_at=NOW)
            job, _ = run(job, TimerFired("job-1"))
    assert delays == [1_000_000, 2_000_000]
    assert job.state is JobState.DEAD and job.dead_reason == "max_attempts_exhausted"
    assert [e.attempt for e in job.errors] == [1, 2, 3]


def test_validation_failure_dead_letters_at_once() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    job, bodies = run(job, AttemptFinished("job-1", 1, "invalid", 5, error_type="ValidationError",
                                           message="to: missing"))
    assert job.state is JobState.DEAD and job.dead_reason == "validation_failed"
    assert bodies[0].retryable is False


def test_replay_gives_a_dead_job_fresh_attempts() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    job, _ = run(job, AttemptFinished("job-1", 1, "invalid", 5))
    job, bodies = run(job, CommandInput(command("job-1", m.ReplayDeadJob("fixed", "ops")), 3))
    assert bodies == [m.JobReplayed("fixed", "ops")] and job.state is JobState.QUEUED and job.attempt == 0


def running_cancel_requested() -> JobView:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    job, bodies = run(job, CommandInput(command("job-1", m.CancelJob("stop it", "ops")), 3))
    assert bodies == [m.JobCancelRequested(1, "stop it", "ops")]
    assert job is not None and job.state is JobState.RUNNING and job.cancel == ("stop it", "ops")
    return job


def test_cancel_of_a_running_job_asks_its_attempt_to_stop_once() -> None:
    job = running_cancel_requested()
    _, bodies = run(job, CommandInput(command("job-1", m.CancelJob()), 4))
    assert isinstance(bodies[0], m.CommandRefused) and "under way" in bodies[0].reason


def test_an_attempt_that_stops_after_a_cancel_request_cancels_the_job() -> None:
    job, bodies = run(running_cancel_requested(), AttemptFinished("job-1", 1, "cancelled", 5, error_type="Cancelled"))
    assert bodies == [m.JobCancelled("stop it", "ops")] and job is not None and job.state is JobState.CANCELLED


def test_an_attempt_that_fails_after_a_cancel_request_is_not_retried() -> None:
    job, bodies = run(running_cancel_requested(), AttemptFinished("job-1", 1, "failed", 5, error_type="IOError"))
    assert [type(b).__name__ for b in bodies] == ["JobFailed", "JobCancelled"]
    assert job is not None and job.state is JobState.CANCELLED and job.errors[0].error_type == "IOError"


def test_an_attempt_that_ignores_a_cancel_request_and_succeeds_completes() -> None:
    job, bodies = run(running_cancel_requested(), AttemptFinished("job-1", 1, "succeeded", 5, result=b"1"))
    assert [type(b).__name__ for b in bodies] == ["JobSucceeded"] and job.state is JobState.COMPLETED


def test_an_orphan_asked_to_stop_is_cancelled_not_requeued() -> None:
    job, bodies = run(running_cancel_requested(), RequeueOrphan("job-1"), replace(CTX, epoch=2))
    assert bodies == [m.JobCancelled("stop it", "ops")] and job is not None and job.state is JobState.CANCELLED


def test_cancelled_without_a_request_is_an_ordinary_failure() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    job, bodies = run(job, AttemptFinished("job-1", 1, "cancelled", 5, error_type="Cancelled"))
    assert [type(b).__name__ for b in bodies] == ["JobFailed", "JobRetryScheduled"]


def test_result_of_a_stale_attempt_is_ignored() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    assert run(job, AttemptFinished("job-1", 2, "succeeded", 5))[1] == []


def test_orphan_requeued_only_under_a_newer_epoch() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    assert run(job, RequeueOrphan("job-1"))[1] == []
    newer = replace(CTX, epoch=2)
    job, bodies = run(job, RequeueOrphan("job-1"), newer)
    assert bodies == [m.JobRequeued(1, 1, "owner_lost")] and job.state is JobState.QUEUED
    job, (started,) = run(job, StartAttempt("job-1"), newer)
    assert started.attempt == 2


def test_a_child_rejected_for_a_bad_tenant_is_still_reported_to_its_parent() -> None:
    scoped = m.Command("c-1", "parent", "ops", 0, m.SubmitJob("email.send", m.Payload(b"{}"), scope="global"))
    out = decide(None, CommandInput(scoped, 1), replace(CTX, scope_tenants=("bad\x00tenant",)))
    parent = None
    for emit in out:
        if isinstance(emit, Emit):
            parent = evolve(parent, event(emit.body, "parent", tenant="ops", at=NOW))
    (child,) = [o.command for o in out if isinstance(o, Send)]
    rejected, report = decide(None, CommandInput(child, 2), CTX)
    assert isinstance(rejected, Emit) and rejected.body.reason == "invalid_tenant"
    assert isinstance(report, Send) and isinstance(report.command.body, m.ReportChild)
    (reported,) = decide(parent, CommandInput(report.command, 3), CTX)[:1]
    assert isinstance(reported.body, m.ChildReported) and reported.body.status == "rejected"


def test_progress_of_the_running_attempt_is_recorded_once_per_change() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    job, bodies = run(job, ProgressReported("job-1", 1, 0.5, "half"))
    assert bodies == [m.JobProgressed(1, 0.5, "half")] and job is not None and job.progress == (0.5, "half")
    assert job.state is JobState.RUNNING
    assert run(job, ProgressReported("job-1", 1, 0.5, "half"))[1] == []  # nothing new
    assert run(job, ProgressReported("job-1", 2, 0.9, ""))[1] == []  # another attempt's
    job, _ = run(job, AttemptFinished("job-1", 1, "failed", 5, error_type="E"))
    assert run(job, ProgressReported("job-1", 1, 0.7, ""))[1] == []  # no longer running
    job, _ = run(job, TimerFired("job-1"), replace(CTX, now=NOW + 10**9))
    job, _ = run(job, StartAttempt("job-1"))
    assert job is not None and job.progress is None  # a new attempt starts from nothing


def test_a_dead_job_can_be_purged_by_a_cancel() -> None:
    job, _ = run(queued_job(), StartAttempt("job-1"))
    job, _ = run(job, AttemptFinished("job-1", 1, "invalid", 5, error_type="ValidationError"))
    assert job is not None and job.state is JobState.DEAD
    job, bodies = run(job, CommandInput(command("job-1", m.CancelJob("purge: known bug", "ops")), 9))
    assert bodies == [m.JobCancelled("purge: known bug", "ops")] and job is not None
    assert job.state is JobState.CANCELLED


def test_a_refused_operator_command_says_why_in_plain_words() -> None:
    job, _ = run(queued_job(), CommandInput(command("job-1", m.CancelJob()), 8))
    assert job is not None and job.state is JobState.CANCELLED
    said = {}
    for name, body in (("cancel", m.CancelJob()), ("replay", m.ReplayDeadJob()),
                       ("reschedule", m.RescheduleJob(NOW)),
                       ("reprioritize", m.ReprioritizeJob(9))):
        _, (refused,) = run(job, CommandInput(command("job-1", body), 9))
        assert isinstance(refused, m.CommandRefused)
        said[name] = refused.reason
    assert said == {"cancel": "job is already cancelled",
                    "replay": "only a dead job can be replayed; this one is cancelled",
                    "reschedule": "only a scheduled or retrying job can be rescheduled; this one is cancelled",
                    "reprioritize": "only a waiting (scheduled, queued or retrying) job can be reprioritized; "
                                    "this one is cancelled"}
