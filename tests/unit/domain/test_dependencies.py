"""Jobs that wait for jobs, decided: a small world of jobs whose commands are delivered by hand. No broker."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field, replace

import pytest

from engine.contract import messages as m
from engine.contract.validation import MAX_DEPENDENCIES, check_submit
from engine.domain.decide import AttemptFinished, CommandInput, DecideContext, Emit, Send, StartAttempt, decide
from engine.domain.jobs import JobView, evolve
from engine.domain.lifecycle import JobState
from engine.errors import ValidationError
from tests.unit.factories import command, event

NOW = 10_000_000
CTX = DecideContext(now=NOW, epoch=1)


@dataclass
class World:
    """Jobs by id and the commands in flight between their partitions, delivered when asked."""

    jobs: dict[str, JobView] = field(default_factory=dict)
    sent: collections.deque[m.Command] = field(default_factory=collections.deque)
    log: list[tuple[str, m.EventBody]] = field(default_factory=list)
    reports: dict[str, dict[str, tuple[str, bytes | None, str]]] = field(
        default_factory=lambda: collections.defaultdict(dict))  # as projections.views.dependencies keeps them

    def apply(self, job_id: str, given: object, ctx: DecideContext = CTX) -> list[m.EventBody]:
        if isinstance(given, CommandInput) and isinstance(given.command.body, m.ReportDependency):
            ctx = replace(ctx, reported=self.reports[job_id].get(given.command.body.dependency_job_id))
        out = decide(self.jobs.get(job_id), given, ctx)  # type: ignore[arg-type]
        bodies = []
        for item in out:
            if isinstance(item, Send):
                self.sent.append(item.command)
                continue
            assert isinstance(item, Emit)
            target = item.job_id or job_id
            after = evolve(self.jobs.get(target), event(item.body, target, at=ctx.now, tenant=item.tenant_id))
            if after is not None:
                self.jobs[target] = after
            if isinstance(item.body, m.DependencyReported):
                b = item.body
                self.reports[target][b.dependency_job_id] = (b.status, b.result, b.error)
            self.log.append((target, item.body))
            bodies.append(item.body)
        return bodies

    def submit(self, job_id: str, depends_on: dict[str, str] | None = None, tenant: str = "acme",
               run_at: int | None = None) -> list[m.EventBody]:
        body = m.SubmitJob("report", m.Payload(b"{}"), run_at=run_at, depends_on=depends_on or {})
        return self.apply(job_id, CommandInput(command(job_id, body, tenant), 1))

    def deliver(self) -> int:
        """Deliver every command in flight (and those they cause); how many."""
        n = 0
        while self.sent:
            cmd = self.sent.popleft()
            self.apply(cmd.job_id, CommandInput(cmd, 1))
            n += 1
        return n

    def run(self, job_id: str, kind: str = "succeeded", result: bytes | None = None) -> None:
        self.apply(job_id, StartAttempt(job_id))
        job = self.jobs[job_id]
        self.apply(job_id, AttemptFinished(job_id, job.attempt, kind, 5, result, "ValueError", "boom",
                                           retryable=False))

    def state(self, job_id: str) -> JobState:
        return self.jobs[job_id].state


def test_a_chain_runs_in_order_and_each_job_gets_the_results_it_waits_for() -> None:
    w = World()
    w.submit("a")
    assert [type(b).__name__ for b in w.submit("b", {"a": "cancel"})] == ["JobSubmitted", "DependenciesAwaited"]
    w.submit("c", {"b": "cancel"})
    w.deliver()
    assert w.state("b") is JobState.WAITING and w.state("c") is JobState.WAITING
    assert w.jobs["a"].dependents == ("b",) and w.jobs["b"].dependents == ("c",)
    w.run("a", result=b'{"rows": 3}')
    w.deliver()
    assert w.state("b") is JobState.QUEUED and w.state("c") is JobState.WAITING
    assert w.reports["b"] == {"a": ("completed", b'{"rows": 3}', "")}
    w.run("b", result=b"2")
    w.deliver()
    assert w.state("c") is JobState.QUEUED and w.reports["c"] == {"b": ("completed", b"2", "")}
    assert (("b", m.JobQueued("dependencies_met")) in w.log)


def test_a_fan_in_is_released_by_its_last_dependency_only() -> None:
    w = World()
    deps = [f"d{i}" for i in range(50)]
    for d in deps:
        w.submit(d)
    w.submit("sum", dict.fromkeys(deps, "cancel"))
    w.deliver()
    for d in deps[:-1]:
        w.run(d, result=d.encode())
    w.deliver()
    assert w.state("sum") is JobState.WAITING and w.jobs["sum"].awaiting() == 1
    w.run(deps[-1], result=b"last")
    w.deliver()
    assert w.state("sum") is JobState.QUEUED
    assert {d: r[1] for d, r in w.reports["sum"].items()} == {d: d.encode() for d in deps[:-1]} | {
        deps[-1]: b"last"}


def test_a_dead_dependency_cancels_the_dependent_naming_it_and_the_cancel_travels_down_the_chain() -> None:
    w = World()
    w.submit("a")
    w.submit("b", {"a": "cancel"})
    w.submit("c", {"b": "cancel"})
    w.deliver()
    w.run("a", kind="failed")
    assert w.state("a") is JobState.DEAD
    w.deliver()
    assert w.state("b") is JobState.CANCELLED and w.state("c") is JobState.CANCELLED
    cancelled = [b for j, b in w.log if j == "b" and isinstance(b, m.JobCancelled)]
    assert cancelled[0].reason == "dependency_failed: job a is dead (ValueError: boom)"
    assert [b for j, b in w.log if j == "c" and isinstance(b, m.JobCancelled)][0].reason.startswith(
        "dependency_failed: job b is cancelled")


def test_under_run_a_failed_dependency_counts_as_ended_with_its_status_and_error() -> None:
    w = World()
    w.submit("a")
    w.submit("b")
    w.submit("c", {"a": "run", "b": "run"})
    w.deliver()
    w.run("a", kind="failed")
    w.run("b", result=b"1")
    w.deliver()
    assert w.state("c") is JobState.QUEUED
    assert w.reports["c"] == {"a": ("dead", None, "ValueError: boom"), "b": ("completed", b"1", "")}


def test_a_dependency_that_ended_before_the_dependent_counts_at_once() -> None:
    w = World()
    w.submit("a")
    w.run("a", result=b"7")
    w.submit("b", {"a": "cancel"})
    w.deliver()
    assert w.state("b") is JobState.QUEUED and w.reports["b"] == {"a": ("completed", b"7", "")}
    assert w.jobs["a"].dependents == ()  # told at once, not recorded


def test_an_unknown_dependency_or_another_tenants_ends_the_dependent_as_dependency_unknown() -> None:
    w = World()
    w.submit("theirs", tenant="globex")
    w.submit("b", {"nowhere": "run"})
    w.submit("c", {"theirs": "run"})
    w.deliver()
    for job in ("b", "c"):
        assert w.state(job) is JobState.CANCELLED
        (cancel,) = [b for j, b in w.log if j == job and isinstance(b, m.JobCancelled)]
        assert cancel.reason.startswith("dependency_unknown: no job ")
    assert w.jobs["theirs"].dependents == () and w.state("theirs") is JobState.QUEUED
    w.run("theirs")
    assert not w.sent  # nobody of another tenant is told


def test_a_report_from_another_tenant_or_of_a_stranger_or_twice_changes_nothing() -> None:
    w = World()
    w.submit("a")
    w.submit("b", {"a": "cancel"})
    w.deliver()
    forged = m.ReportDependency("a", "completed", b"x")
    assert w.apply("b", CommandInput(command("b", forged, tenant="globex"), 1)) == []
    assert w.apply("b", CommandInput(command("b", m.ReportDependency("zz", "completed")), 1)) == []
    w.run("a")
    w.deliver()
    assert w.state("b") is JobState.QUEUED
    assert w.apply("b", CommandInput(command("b", forged), 1)) == []


def test_cancelling_a_dependent_leaves_its_dependency_and_cancelling_a_dependency_releases_by_the_rule() -> None:
    w = World()
    w.submit("a")
    w.submit("b", {"a": "cancel"})
    w.submit("c", {"a": "run"})
    w.deliver()
    w.apply("b", CommandInput(command("b", m.CancelJob("no", "ops")), 1))
    assert w.state("b") is JobState.CANCELLED and not w.sent and w.state("a") is JobState.QUEUED
    w.apply("a", CommandInput(command("a", m.CancelJob("gone", "ops")), 1))
    w.deliver()
    assert w.state("c") is JobState.QUEUED and w.reports["c"] == {"a": ("cancelled", None, "gone")}


def test_a_dead_dependency_is_reported_once_purged_or_replayed_later() -> None:
    w = World()
    w.submit("a")
    w.submit("b", {"a": "run"})
    w.deliver()
    w.run("a", kind="failed")
    assert w.deliver() == 1
    w.apply("a", CommandInput(command("a", m.ReplayDeadJob()), 1))
    w.run("a")
    w.apply("a", CommandInput(command("a", m.CancelJob()), 1))
    assert not w.sent


def test_a_released_job_whose_run_at_is_ahead_is_scheduled() -> None:
    w = World()
    w.submit("a")
    w.submit("b", {"a": "cancel"}, run_at=NOW + 60_000_000)
    w.deliver()
    w.run("a")
    w.deliver()
    assert w.state("b") is JobState.SCHEDULED and w.jobs["b"].due_at == NOW + 60_000_000


def test_a_waiting_job_can_be_reprioritized_and_is_never_started() -> None:
    w = World()
    w.submit("b", {"a": "cancel"})
    assert w.apply("b", StartAttempt("b")) == []
    (body,) = w.apply("b", CommandInput(command("b", m.ReprioritizeJob(9)), 1))
    assert isinstance(body, m.JobReprioritized) and w.state("b") is JobState.WAITING


def _submit(depends_on: object, job_id: str = "job-1", scope: str | None = None) -> m.Command:
    return command(job_id, m.SubmitJob("report", m.Payload(b"{}"), scope=scope,
                                       depends_on=depends_on))  # type: ignore[arg-type]


@pytest.mark.parametrize("depends_on, scope, words", [
    ({"job-1": "cancel"}, None, "cannot wait for itself"),
    ({"a": "maybe"}, None, "if_dependency_fails must be cancel or run"),
    ({"": "run"}, None, "depends_on"),
    ({"a": "run"}, "global", "a scoped job"),
    (["a"], None, "must map job ids"),
    ({f"j{i}": "run" for i in range(MAX_DEPENDENCIES + 1)}, None, "at most 10,000 allowed"),
])
def test_bad_dependencies_are_one_error_naming_the_field(depends_on: object, scope: str | None, words: str) -> None:
    with pytest.raises(ValidationError, match=words) as caught:
        check_submit(_submit(depends_on, scope=scope), NOW, 1024)
    assert str(caught.value).startswith("depends_on: ") and caught.value.reason == "invalid_depends_on"


def test_ten_thousand_dependencies_are_admitted() -> None:
    deps = {f"{i:036d}": "cancel" for i in range(MAX_DEPENDENCIES)}
    assert check_submit(_submit(deps), NOW, 1024).depends_on is deps


def test_a_dependency_reported_twice_while_the_job_waits_counts_once() -> None:
    w = World()
    w.submit("a")
    w.submit("b")
    w.submit("c", {"a": "cancel", "b": "cancel"})
    w.deliver()
    w.run("a")
    report = next(c for c in w.sent if c.job_id == "c")
    w.deliver()
    assert w.apply("c", CommandInput(report, 1)) == []  # told already (projections.views.dependencies says so)
    assert w.state("c") is JobState.WAITING and w.jobs["c"].awaiting() == 1
