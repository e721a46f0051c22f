"""What a waiter says holds a queued job (open breaker, pause), and the lines ``--wait`` prints. Pure."""

from __future__ import annotations

from engine.cli.jobs import change_line
from engine.contract import messages as m
from engine.domain.breaker import BreakerStatus
from engine.questions.holdups import Holdups, Snapshot, from_records
from engine.questions.history import LoggedEvent
from engine.questions.outcome import Outcome
from tests.unit.factories import event

S = 1_000_000  # µs
T0 = 1_796_000_000 * S  # 2026-11-30T00:53:20Z


def test_an_open_breaker_holds_its_task_type_until_it_may_reopen() -> None:
    holdups = Holdups()
    assert holdups.see(2, event(m.BreakerOpened("pay", 3, T0 + 19 * S), None, at=T0))
    assert holdups.why("pay", 0, T0 + S) == "breaker open for pay until 00:53:39 UTC"  # any partition: one board
    assert holdups.why("mail", 0, T0 + S) is None
    assert holdups.why("pay", 0, T0 + 20 * S) is None  # the cool-down is over: a probe may start
    assert holdups.see(1, event(m.BreakerHalfOpened("pay", "job-9"), None, at=T0 + 19 * S))
    assert holdups.why("pay", 0, T0 + S) is None
    assert not holdups.see(1, event(m.JobQueued("due"), "job-1"))


def test_an_older_breaker_event_does_not_replace_a_newer_one() -> None:
    holdups = Holdups()
    holdups.see(0, event(m.BreakerClosed("pay"), None, at=T0 + 5 * S))
    holdups.see(1, event(m.BreakerOpened("pay", 3, T0 + 60 * S), None, at=T0))  # read later, happened earlier
    assert holdups.why("pay", 0, T0 + 6 * S) is None


def test_a_pause_holds_only_its_partition_and_a_resume_ends_it() -> None:
    holdups = Holdups()
    holdups.see(1, event(m.TaskTypePaused("pay", "maintenance"), "tasktype:pay#0", at=T0))
    assert holdups.why("pay", 1, T0) == "paused: task type pay is paused (maintenance)"
    assert holdups.why("pay", 0, T0) is None
    holdups.see(1, event(m.TaskTypeResumed("pay"), "tasktype:pay#0", at=T0 + S))
    assert holdups.why("pay", 1, T0 + S) is None


def test_the_projections_are_read_at_the_start_and_again_when_they_change() -> None:
    reads: list[Snapshot] = [from_records([("pay", BreakerStatus.OPEN, T0, T0 + 10 * S)], [(0, "mail", "")],
                                          frozenset({0, 1}))]
    holdups = Holdups(lambda: reads[-1], refresh_s=0.0)
    assert holdups.why("pay", 1, T0) is not None and holdups.why("mail", 0, T0) == "paused: task type mail is paused"
    holdups.see(2, event(m.TaskTypePaused("mail"), "tasktype:mail#3", at=T0))  # a partition not in the projections
    reads.append(from_records([("pay", BreakerStatus.CLOSED, T0 + S, None)], [], frozenset({0, 1})))
    assert holdups.refresh()
    assert holdups.why("pay", 1, T0 + 2 * S) is None and holdups.why("mail", 0, T0) is None
    assert holdups.why("mail", 2, T0) is not None  # kept: read live, and no projection covers partition 2
    assert not holdups.refresh()


def logged(body: m.EventBody, at: int = T0) -> LoggedEvent:
    return LoggedEvent(0, event(body, at=at))


def test_the_lines_of_a_wait_name_the_attempt_the_error_and_what_holds_the_job() -> None:
    outcome = Outcome("job-1")
    lines = []
    for body in (m.JobSubmitted("pay", m.Payload(b"{}"), 5, "NORMAL", 3), m.JobQueued("submitted"),
                 m.JobStarted(1, T0), m.JobFailed(1, "ConnectionError", "down", 5), m.JobRetryScheduled(2, T0 + 2 * S),
                 m.JobQueued("due"), m.JobStarted(2, T0), m.JobFailed(2, "ConnectionError", "down", 5),
                 m.JobDeadLettered("max_attempts_exhausted", 2)):
        outcome.apply(logged(body))
        lines.append(change_line(outcome))
    assert outcome.task_type == "pay"
    assert lines == ["accepted", "queued", "running (attempt 1)", None,
                     "retrying: attempt 1 failed (ConnectionError: down); attempt 2 at 00:53:22 UTC", "queued",
                     "running (attempt 2)", None, "dead (max_attempts_exhausted)"]
    queued = Outcome("job-2", status="queued", held="breaker open for pay until 00:53:39 UTC")
    assert change_line(queued) == "breaker open for pay until 00:53:39 UTC"


def test_a_rate_limit_is_named_while_it_stands_in_the_job_s_partition() -> None:
    holdups = Holdups(lambda: from_records([], [], frozenset({0}), [(0, "mail", 10.0)]), refresh_s=0.0)
    assert holdups.why("mail", 0, T0) == "rate limited: task type mail starts at most 10/s"
    assert holdups.why("mail", 1, T0) is None  # no limit known in partition 1
    holdups.see(1, event(m.RateLimitSet("mail", 2.5, 1, 2_400_000, 1), "ratelimit:mail#1", at=T0))
    assert holdups.why("mail", 1, T0) == "rate limited: task type mail starts at most 2.5/s"
    holdups.see(1, event(m.RateLimitCleared("mail"), "ratelimit:mail#1", at=T0 + S))
    assert holdups.why("mail", 1, T0 + S) is None
    holdups.see(0, event(m.TaskTypePaused("mail", "db"), "tasktype:mail#0", at=T0))
    assert holdups.why("mail", 0, T0) == "paused: task type mail is paused (db)"  # a pause says more than a limit


def test_the_lines_of_a_wait_for_a_job_with_dependencies() -> None:
    outcome = Outcome("job-1")
    lines = []
    for body in (m.JobSubmitted("pay", m.Payload(b"{}"), 5, "NORMAL", 3, depends_on={"a": "cancel", "b": "cancel"}),
                 m.DependenciesAwaited(2), m.DependencyReported("a", "completed", b"1"),
                 m.DependencyReported("b", "dead", None, "E: boom"),
                 m.JobCancelled("dependency_failed: job b is dead")):
        outcome.apply(logged(body))
        lines.append(change_line(outcome))
    assert lines == ["accepted", "waiting for 2 job(s)", "waiting for 2 job(s)", "waiting for 2 job(s)",
                     "cancelled (dependency_failed: job b is dead)"]
    assert outcome.dependencies == {"a": "completed", "b": "dead"}
