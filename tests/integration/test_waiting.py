"""Waiting for many jobs on a real broker: one reader for all of them, answers in submission order or as they end."""

from __future__ import annotations

from pathlib import Path

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import start_engine


def test_wait_all_and_as_completed_follow_many_jobs(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    handles = client.submit_many([{"task_type": "echo", "tenant": "acme", "payload": {"n": n}} for n in range(60)])
    outcomes = client.wait_all(handles, 60)
    assert [o.job_id for o in outcomes] == [h.job_id for h in handles]
    assert [o.result["payload"]["n"] for o in outcomes] == list(range(60))
    assert all(o.status == "completed" and o.attempts == 1 for o in outcomes)

    slow = client.submit("slow", {"seconds": 2}, tenant="acme")
    fast = client.submit("echo", {}, tenant="acme")
    later = client.submit("echo", {}, tenant="acme", delay=3600)
    seen: list[tuple[str, str]] = []
    order = list(client.as_completed([slow, fast, later], 20, watch=lambda o: seen.append((o.job_id, o.status))))
    assert [o.job_id for o in order] == [fast.job_id, slow.job_id, later.job_id]
    assert order[0].done and order[1].status == "completed" and not order[2].done and order[2].status == "scheduled"
    assert [s for j, s in seen if j == slow.job_id] == ["accepted", "queued", "running", "completed"]
    assert engine.proc.poll() is None


def test_a_finished_job_and_a_duplicate_are_answered_again(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    first = client.submit("echo", {"v": 1}, tenant="acme", idempotency_key="k-1")
    assert first.wait(30).status == "completed"
    assert first.wait(5).result["payload"] == {"v": 1}  # a finished job: answered again from the log
    again = client.submit("echo", {"v": 2}, tenant="acme", idempotency_key="k-1")
    (outcome,) = client.wait_all([again], 30)
    assert again.job_id == first.job_id and outcome.status == "completed"
    assert outcome.result["payload"] == {"v": 1}
