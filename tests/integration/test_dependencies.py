"""Jobs that wait for jobs on a real broker: chains, fan-in with every result, failures, failover of either owner."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from engine.client import Client
from engine.config import Settings
from engine.contract.ids import job_id_for_key
from engine.contract.partitioner import partition_for
from tests.integration.conftest import EngineProcess, eventually, start_engine

T = TypeVar("T")


def until(check: Callable[[], T], timeout: float = 60.0) -> T:
    """What ``check`` returns once it is truthy; AssertionError after ``timeout`` s."""
    def truthy() -> T:
        value = check()
        assert value, "still not so"
        return value
    return eventually(truthy, timeout)


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *args, "--bootstrap",
                           settings.require_bootstrap(), "--namespace", settings.namespace],
                          capture_output=True, text=True, timeout=120)


def test_a_fan_in_across_partitions_then_a_chain_each_with_the_results_it_waited_for(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    start_engine(engines, settings, "solo", tmp_path).wait_active(3)
    parts = client.submit_many([{"task_type": "echo", "payload": {"n": n}, "tenant": "acme"} for n in range(12)])
    assert len({p.partition for p in parts}) == 3
    fan_in = client.submit("gather", {"step": 1}, tenant="acme", depends_on=parts)
    chained = client.submit("gather", {"step": 2}, tenant="acme", depends_on=[fan_in])
    outcome = chained.wait(60)
    assert outcome.status == "completed", outcome
    assert outcome.result["dependencies"][fan_in.job_id]["payload"] == {"step": 1}
    gathered = client.status(fan_in.job_id).result["dependencies"]
    assert {job_id: r["payload"]["n"] for job_id, r in gathered.items()} == {p.job_id: n for n, p in enumerate(parts)}
    history = [e.event.type for e in client.status(fan_in.job_id).events]
    assert history[:2] == ["JobSubmitted", "DependenciesAwaited"] and history.count("DependencyReported") == 12
    assert "JobStarted" in history and history.index("JobQueued") > history.index("DependenciesAwaited")


def test_a_failed_dependency_cancels_or_runs_and_an_unknown_one_is_answered(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    start_engine(engines, settings, "solo", tmp_path).wait_active(3)
    broken = client.submit("fragile", {"fixed_when": str(tmp_path / "never")}, tenant="acme")
    assert broken.wait(60).status == "dead"
    strict = client.submit("gather", {}, tenant="acme", depends_on=[broken])
    lenient = client.submit("gather", {}, tenant="acme", depends_on=[broken], if_dependency_fails="run")
    unknown = client.submit("gather", {}, tenant="acme", depends_on=["no-such-job"], if_dependency_fails="run")
    theirs = client.submit("echo", {}, tenant="globex")
    assert theirs.wait(60).status == "completed"
    other = client.submit("gather", {}, tenant="acme", depends_on=[theirs])
    cancelled = strict.wait(60)
    assert cancelled.status == "cancelled" and cancelled.reason is not None
    assert cancelled.reason.startswith(f"dependency_failed: job {broken.job_id} is dead")
    ran = lenient.wait(60)
    assert ran.status == "completed" and ran.result["dependencies"][broken.job_id]["status"] == "dead"
    for handle in (unknown, other):
        answered = handle.wait(60)
        assert answered.status == "cancelled" and answered.reason.startswith("dependency_unknown: "), answered
    assert client.status(theirs.job_id).dependents == []  # another tenant's job is never waited on

    later = client.submit("echo", {}, tenant="acme", delay=600)
    follower = client.submit("gather", {}, tenant="acme", depends_on=[later], if_dependency_fails="run")
    until(lambda: client.status(later.job_id).dependents == [follower.job_id])
    client.cancel(later.job_id, reason="not needed")  # cancelling a dependency releases its dependents by the rule
    released = follower.wait(60)
    assert released.status == "completed"
    assert released.result["dependencies"] == {later.job_id: {"status": "cancelled", "error": "not needed"}}
    client.cancel(follower.job_id)  # refused: final; and cancelling a dependent never touches its dependencies


def test_cli_submit_after_and_status_show_what_a_job_waits_for(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    start_engine(engines, settings, "solo", tmp_path).wait_active(3)
    gate = client.submit("gated", {"open_when": str(tmp_path / "gate")}, tenant="acme")
    done = client.submit("echo", {"n": 1}, tenant="acme")
    assert done.wait(60).status == "completed"
    shown = cli(settings, "submit", "gather", "--tenant", "acme", "--after", gate.job_id, "--after", done.job_id,
                "--json")
    assert shown.returncode == 0, shown.stderr
    job_id = json.loads(shown.stdout)["job_id"]
    waiting = until(lambda: (s := client.status(job_id)).dependencies.get(done.job_id) == "completed" and s)
    assert waiting.status == "waiting" and waiting.dependencies[gate.job_id] == "pending"
    status = cli(settings, "status", job_id)
    assert "waiting" in status.stdout and re.search(rf"pending\s+{gate.job_id}", status.stdout), status.stdout
    assert job_id in cli(settings, "status", gate.job_id).stdout  # its dependents
    (tmp_path / "gate").touch()
    assert until(lambda: client.status(job_id).done, 60)
    history = cli(settings, "history", job_id).stdout
    assert "waits for 2 job(s)" in history and f"job {gate.job_id} completed" in history
    bad = cli(settings, "submit", "gather", "--tenant", "acme", "--after", "")
    assert bad.returncode != 0 and bad.stderr.strip() == "epochq: error: depends_on: must not be empty", bad.stderr
    assert "Traceback" not in bad.stderr


def owned(engine: EngineProcess) -> set[int]:
    """The partitions an engine logged as active (most recent claims)."""
    return {int(n) for n in re.findall(r"partition (\d+): active at epoch", engine.logs())}


def key_in(partitions: set[int], tenant: str, prefix: str) -> str:
    """An idempotency key whose job id lands in one of ``partitions`` (of 3)."""
    return next(f"{prefix}-{i}" for i in range(1000)
                if partition_for(job_id_for_key(tenant, f"{prefix}-{i}"), 3) in partitions)


def test_kill_nine_of_the_dependencys_owner_between_its_success_and_the_release_and_a_zombie(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path)
    until(lambda: owned(b) and len(owned(a) - owned(b)) >= 1, 60)
    mine_a, mine_b = owned(a) - owned(b), owned(b)
    dependency = client.submit("gated", {"open_when": str(tmp_path / "gate")}, tenant="acme",
                               idempotency_key=key_in(mine_a, "acme", "dep"))
    dependent = client.submit("gather", {}, tenant="acme", depends_on=[dependency],
                              idempotency_key=key_in(mine_b, "acme", "after"))
    until(lambda: client.status(dependency.job_id).dependents == [dependent.job_id], 60)
    until(lambda: client.status(dependency.job_id).status == "running", 60)
    b.signal(signal.SIGSTOP)  # the dependent's owner cannot release it
    (tmp_path / "gate").touch()
    until(lambda: client.status(dependency.job_id).status == "completed", 60)
    a.signal(signal.SIGKILL)  # the dependency's owner dies after its success...
    assert client.status(dependent.job_id).status == "waiting"  # ...and before the release
    c = start_engine(engines, settings, "c", tmp_path)
    c.wait_active(3, timeout=120)  # a is dead and b silent: c holds every partition
    b.signal(signal.SIGCONT)  # b wakes as a zombie of the dependent's partition: fenced
    outcome = dependent.wait(120)
    assert outcome.status == "completed", outcome
    assert outcome.result["dependencies"] == {dependency.job_id: {"gated": True, "attempt": 1}}
    ends = [e.event.type for e in client.status(dependent.job_id).events
            if not e.fenced and e.event.type in ("JobSucceeded", "JobCancelled", "JobDeadLettered")]
    reports = [e for e in client.status(dependent.job_id).events
               if not e.fenced and e.event.type == "DependencyReported"]
    assert ends == ["JobSucceeded"] and len(reports) == 1
