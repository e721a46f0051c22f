"""End to end on a real broker: jobs complete, failures retry then dead-letter, replay, rebuild."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import start_engine, status_is, verify_partition


def test_jobs_complete_fail_retry_dead_letter_and_replay(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)

    handles = client.submit_many([{"task_type": "echo", "payload": {"n": i}, "tenant": f"t{i % 3}"} for i in range(30)])
    outcomes = [h.wait(30) for h in handles]
    assert [o.status for o in outcomes] == ["completed"] * 30
    assert sorted(o.result["payload"]["n"] for o in outcomes) == list(range(30))

    fix = tmp_path / "fixed"
    failing = client.submit("flaky", {"fixed_when": str(fix)}, tenant="acme")
    dead = failing.wait(60)
    assert dead.status == "dead" and dead.reason == "max_attempts_exhausted" and dead.attempts == 4
    failures = [e.event.body for e in dead.events if e.event.type == "JobFailed"]
    assert [f.attempt for f in failures] == [1, 2, 3, 4]
    assert all("downstream unavailable" in f.message for f in failures)
    retries = [e.event for e in dead.events if e.event.type == "JobRetryScheduled"]
    fails = [e.event for e in dead.events if e.event.type == "JobFailed"]
    delays = [r.body.due_at - f.occurred_at for r, f in zip(retries, fails)]
    assert delays == sorted(delays) and delays[0] < delays[-1], delays

    fix.touch()
    replay = client.replay(failing.job_id, tenant="acme", reason="downstream fixed", requested_by="test")
    replayed = replay.wait(30)
    assert replayed.status == "completed" and replayed.result == {"fixed": True, "attempt": 1}
    replay_event = next(e.event.body for e in replayed.events if e.event.type == "JobReplayed")
    assert replay_event.requested_by == "test" and replay_event.reason == "downstream fixed"

    assert engine.stop() == 0
    for p in range(3):
        result = verify_partition(engine.settings(settings), p)
        assert result.matches, result


def test_cli_history_and_dlq_show_the_whole_story(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    handle = client.submit("flaky", {"fixed_when": str(tmp_path / "never")}, tenant="acme")
    assert handle.wait(60).status == "dead"
    cli = [sys.executable, "-m", "engine.cli.main"]
    flags = ["--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace,
             "--state-dir", str(engine.state_dir)]
    history = subprocess.run([*cli, "history", handle.job_id, *flags], capture_output=True, text=True, check=True)
    for word in ("JobSubmitted", "JobStarted", "JobFailed", "JobRetryScheduled", "JobDeadLettered", "ConnectionError"):
        assert word in history.stdout
    dlq = subprocess.run([*cli, "dlq", "list", *flags], capture_output=True, text=True, check=True)
    assert handle.job_id in dlq.stdout and "1 dead job(s)" in dlq.stdout
    verify_run = subprocess.run([*cli, "projections", "rebuild", "--all", "--verify", *flags],
                                capture_output=True, text=True)
    assert verify_run.returncode == 0, verify_run.stdout + verify_run.stderr
    assert verify_run.stdout.count("match") == 3

    assert engine.stop() == 0
    for parallel in ("2", "1"):  # processes rebuilding partitions at once, or one after the other in this one
        rebuilt = subprocess.run([*cli, "projections", "rebuild", "--all", "--parallel", parallel, *flags],
                                 capture_output=True, text=True)
        assert rebuilt.returncode == 0 and rebuilt.stdout.count("rebuilt up to offset") == 3, rebuilt.stderr
        assert ("2 at a time" in rebuilt.stderr) == (parallel == "2")
        checked = subprocess.run([*cli, "projections", "rebuild", "--all", "--verify", "--parallel", parallel,
                                  *flags], capture_output=True, text=True)
        assert checked.returncode == 0 and checked.stdout.count(": match") == 3, checked.stdout + checked.stderr
    history = subprocess.run([*cli, "history", handle.job_id, *flags], capture_output=True, text=True, check=True)
    assert "JobDeadLettered" in history.stdout
    refused = subprocess.run([*cli, "projections", "rebuild", "--all", "--parallel", "0", *flags],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "--parallel" in refused.stderr and "Traceback" not in refused.stderr


def test_idempotency_delay_and_cancel(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    first = client.submit("echo", {"v": 1}, tenant="acme", idempotency_key="order-42")
    second = client.submit("echo", {"v": 2}, tenant="acme", idempotency_key="order-42")
    other_tenant = client.submit("echo", {"v": 3}, tenant="beta", idempotency_key="order-42")
    assert first.job_id == second.job_id != other_tenant.job_id
    assert first.wait(30).result["payload"] == {"v": 1}
    again = second.wait(30)
    assert again.duplicate and again.status == "completed" and again.result["payload"] == {"v": 1}
    assert other_tenant.wait(30).result["payload"] == {"v": 3}

    delayed = client.submit("echo", {}, tenant="acme", delay=1.5)
    assert delayed.wait(30, until=status_is("scheduled")).status == "scheduled"
    done = delayed.wait(30)
    started = next(e.event for e in done.events if e.event.type == "JobStarted")
    assert done.status == "completed" and started.occurred_at >= started.body.due_at

    later = client.submit("echo", {}, tenant="acme", delay=60)
    assert later.wait(30, until=status_is("scheduled")).status == "scheduled"
    cancelled = client.cancel(later.job_id, tenant="acme", reason="not needed").wait(10)
    assert cancelled.status == "cancelled"
