"""A planned hand-back: the owner re-queues its own attempts that outlived the grace period, saying why, and asks
them to stop; what a waiter and ``epochq status`` say of re-queued attempts; the rebalance timeout. No broker."""

from __future__ import annotations

from engine.cli.jobs import change_line
from engine.contract import messages as m
from engine.domain.decide import DecideContext, Emit, RequeueReason, TaskPolicy
from engine.domain.lifecycle import JobState
from engine.domain.retry import RetryPolicy
from engine.questions.logged import LoggedEvent
from engine.questions.outcome import Outcome
from engine.runtime.loop import orphans
from engine.runtime.loop.draft import cancel_requests
from engine.runtime.loop.inbox import REVOKE_SLACK_S, rebalance_timeout_ms
from projections.views.indexes import running_jobs
from tests.unit.factories import event, submit
from tests.unit.runtime.loop.test_pipeline import NOW, Rig, rig

__all__ = ["rig"]


def running(rig: Rig, n: int) -> list[str]:
    for i in range(n):
        rig.admit(submit(f"job-{i}"))
    rig.dispatch()
    rig.apply()
    return sorted(job_id for job_id, _ in running_jobs(rig.store))


def test_a_hand_back_requeues_the_owners_running_jobs_with_its_reason_and_asks_them_to_stop(rig: Rig) -> None:
    jobs = running(rig, 2)
    staged = orphans.hand_back(rig.draft, jobs, RequeueReason.OWNER_STOPPED, rig.poison, NOW)
    assert [(e.job_id, e.body) for e in staged] == [(j, m.JobRequeued(1, 1, "owner_stopped")) for j in jobs]
    assert [rig.job_state(j) for j in jobs] == [JobState.QUEUED, JobState.QUEUED] and rig.poisoned == []
    assert sorted(cancel_requests(rig.draft.staged)) == [(j, 1) for j in jobs]  # the executor stops them
    rig.apply()
    assert running_jobs(rig.store) == [] and orphans.orphaned(running_jobs(rig.store), 2) == []


def test_a_hand_back_leaves_jobs_an_older_epoch_started_to_the_next_owner(rig: Rig) -> None:
    jobs = running(rig, 1)
    rig.draft.claim(2)
    rig.draft.stage(Emit(None, None, m.OwnershipClaimed(0, "owner-a")), NOW)
    rig.apply()
    assert orphans.hand_back(rig.draft, jobs, RequeueReason.HANDOVER, rig.poison, NOW) == []
    before = len(rig.draft.staged.events)
    orphans.requeue(rig.draft, orphans.orphaned(running_jobs(rig.store), 2), rig.poison, NOW)
    staged = rig.draft.staged.events[before:]
    assert [e.body for e in staged] == [m.JobRequeued(1, 1, "owner_lost")]
    assert cancel_requests(rig.draft.staged) == []  # another epoch's attempt: not running here


def logged(*bodies: m.EventBody) -> Outcome:
    outcome = Outcome("job-1")
    for body in bodies:
        outcome.apply(LoggedEvent(0, event(body)))
    return outcome


def test_status_counts_attempts_without_the_requeued_ones_and_a_waiter_is_told_why() -> None:
    started = [m.JobSubmitted("long", m.Payload(b"{}"), 5, "NORMAL", 1), m.JobQueued("submitted"),
               m.JobStarted(1, 0)]
    outcome = logged(*started, m.JobRequeued(1, 1, "handover"))
    assert (outcome.status, outcome.attempts, outcome.requeues) == ("queued", 0, 1)
    assert change_line(outcome) == "queued again (handover: the attempt is not counted)"
    outcome.apply(LoggedEvent(0, event(m.JobStarted(2, 0), epoch=2)))
    assert (outcome.attempts, outcome.requeues) == (1, 1)
    assert change_line(outcome) == "running (attempt 1, and 1 re-queued (handover), not counted)"
    assert logged(*started, m.JobRequeued(1, 1)).requeued_why == "owner changed"  # written before v6


def test_status_says_which_pool_runs_a_remote_attempt_as_its_start_recorded_it() -> None:
    submitted = [m.JobSubmitted("render", m.Payload(b"{}"), 5, "NORMAL", 1), m.JobQueued("submitted")]
    remote = logged(*submitted, m.JobStarted(1, 0, pool="gpu"))
    assert remote.pool == "gpu" and change_line(remote) == "running on pool gpu (attempt 1)"
    assert logged(*submitted, m.JobStarted(1, 0, pool="")).pool is None  # in an engine's process
    assert change_line(logged(*submitted, m.JobStarted(1, 0))) == "running (attempt 1)"  # written before v7
    remote.apply(LoggedEvent(0, event(m.JobSucceeded(1, 5))))
    assert change_line(remote) == "completed"
    from engine.cli.jobs import _brief
    from engine.questions.logged import event_json

    assert _brief(event_json(LoggedEvent(0, event(m.JobStarted(1, 0, pool="gpu"))))) == \
        "  pool=gpu due_at=1970-01-01T00:00:00.000Z"  # epochq history's row


def test_the_rebalance_timeout_outlasts_the_longest_revocation_wait() -> None:
    assert rebalance_timeout_ms(10.0) == 120_000  # Kafka's default stands for the default grace
    for grace in (0.0, 10.0, 60.0, 300.0):
        assert rebalance_timeout_ms(grace) >= (grace + REVOKE_SLACK_S + 60.0) * 1000


def test_requeues_are_counted_in_the_metrics_by_reason() -> None:
    from engine.runtime.observe.metrics import EngineMetrics

    metrics = EngineMetrics()
    try:
        for reason in ("handover", "handover", "owner_lost", ""):
            metrics.observe(event(m.JobRequeued(1, 1, reason)), "applied", None, None)

        def count(reason: str) -> float | None:
            return metrics.registry.get_sample_value("epochq_jobs_requeued_total",
                                                     {"task_type": "unknown", "reason": reason})
        assert (count("handover"), count("owner_lost"), count("unknown"), count("owner_stopped")) == (2, 1, 1, None)
    finally:
        metrics.close()


def test_an_orphan_lost_more_than_its_task_types_max_lost_is_dead_lettered_with_the_engines_policies(
        rig: Rig) -> None:
    jobs = running(rig, 1)
    rig.draft.claim(2)
    rig.draft.stage(Emit(None, None, m.OwnershipClaimed(0, "owner-a")), NOW)
    rig.apply()
    policies = DecideContext(0, tasks={"email.send": TaskPolicy(RetryPolicy(max_lost=0))})
    before = len(rig.draft.staged.events)
    orphans.requeue(rig.draft, orphans.orphaned(running_jobs(rig.store), 2), rig.poison, NOW, policies)
    staged = rig.draft.staged.events[before:]
    assert [type(e.body) for e in staged] == [m.JobFailed, m.JobDeadLettered]
    assert staged[1].body == m.JobDeadLettered("owner_lost_repeatedly", 1) and rig.job_state(jobs[0]) is JobState.DEAD


def test_orphans_started_under_this_processs_own_epochs_are_told_apart() -> None:
    theirs, mine = orphans.ours([("a", 1), ("b", 2), ("c", 3)], {2, 3})
    assert theirs == [("a", 1)] and mine == [("b", 2), ("c", 3)]
    assert orphans.ours([("a", 1)], set()) == ([("a", 1)], [])
