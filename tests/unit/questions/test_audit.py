"""Which events an audit exports: pure selection over one partition's events (no Kafka)."""

from __future__ import annotations

from engine.contract import messages as m
from engine.questions.audit import AuditFilter, AuditSummary, matching_events
from engine.questions.history import with_fencing
from tests.unit.factories import claim, event

PAYLOAD = m.Payload(b"{}")


def submitted(job_id: str, tenant: str, task_type: str = "email.send", at: int = 1_000, epoch: int = 1) -> m.Event:
    return event(m.JobSubmitted(task_type, PAYLOAD, 5, "NORMAL", 3), job_id, tenant=tenant, at=at, epoch=epoch)


def partition_log() -> list[m.Event]:
    """Two tenants' jobs interleaved, a refused command, a cancel without tenant, a zombie write."""
    return [
        claim(1),
        submitted("a1", "alpha", at=1_000),
        submitted("b1", "beta", at=1_100),
        event(m.JobQueued("submitted"), "a1", tenant="alpha", at=1_200),
        event(m.CommandRefused("CancelJob", "unknown", "no job with this id"), "a9", tenant="alpha", at=1_250),
        submitted("a2", "alpha", task_type="report.build", at=2_000),
        event(m.JobCancelled("not needed"), "a2", tenant="", at=2_100),  # a CancelJob sent without a tenant
        event(m.JobRejected("email.send", "queue_full"), "a3", tenant="alpha", at=2_200),
        claim(2, owner="owner-b"),
        event(m.JobStarted(1, 1_000), "a1", tenant="alpha", epoch=1, at=3_000),  # the fenced zombie
        event(m.JobQueued("requeued"), "a1", tenant="alpha", epoch=2, at=3_100),
        event(m.CommandRefused("SubmitJob", "queued", "a job with this id already exists"), "b1",
              tenant="alpha", epoch=2, at=3_200),  # alpha reused beta's job id: beta's job
    ]


def audit(flt: AuditFilter) -> tuple[list[tuple[str | None, str, bool]], AuditSummary]:
    summary = AuditSummary()
    logged = with_fencing(enumerate(partition_log()), None)
    rows = [(a.logged.event.job_id, a.logged.event.type, a.logged.fenced)
            for a in matching_events(4, logged, flt, summary)]
    return rows, summary


def test_a_tenant_gets_every_event_of_its_jobs_in_log_order_with_fencing_verdicts() -> None:
    rows, summary = audit(AuditFilter("alpha"))
    assert rows == [
        ("a1", "JobSubmitted", False), ("a1", "JobQueued", False), ("a9", "CommandRefused", False),
        ("a2", "JobSubmitted", False), ("a2", "JobCancelled", False), ("a3", "JobRejected", False),
        ("a1", "JobStarted", True), ("a1", "JobQueued", False),
    ]
    assert (summary.events, sorted(summary.jobs), summary.fenced) == (8, ["a1", "a2", "a3", "a9"], 1)


def test_a_job_belongs_to_the_tenant_that_submitted_it() -> None:
    rows, _ = audit(AuditFilter("beta"))
    assert rows == [("b1", "JobSubmitted", False), ("b1", "CommandRefused", False)]


def test_task_type_is_remembered_from_the_submission() -> None:
    rows, _ = audit(AuditFilter("alpha", task_type="report.build"))
    assert rows == [("a2", "JobSubmitted", False), ("a2", "JobCancelled", False)]
    rows, _ = audit(AuditFilter("alpha", task_type="email.send"))
    assert [r[0] for r in rows] == ["a1", "a1", "a3", "a1", "a1"]  # a9 was never submitted: no task type


def test_time_range_is_half_open() -> None:
    rows, summary = audit(AuditFilter("alpha", since_us=1_200, until_us=3_000))
    assert [r[1] for r in rows] == ["JobQueued", "CommandRefused", "JobSubmitted", "JobCancelled", "JobRejected"]
    assert summary.line() == "5 events of 4 jobs, 0 fenced writes (read 0 records in 0 partitions)"
