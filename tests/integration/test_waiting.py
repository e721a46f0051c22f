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
    # the wait runs out (10 s) with later still scheduled: as_completed answers it then, as it stands
    order = list(client.as_completed([slow, fast, later], 10, watch=lambda o: seen.append((o.job_id, o.status))))
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


def test_a_wait_says_what_holds_a_queued_job_an_open_breaker_or_a_pause(  # type: ignore[no-untyped-def]
        settings: Settings, engines, tmp_path: Path) -> None:
    from engine.cli.jobs import change_line

    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    with Client(engine.settings(settings)) as client:  # the engine's projections: how breakers and pauses stand
        broken = client.submit_many([{"task_type": "fragile", "tenant": "acme",
                                      "payload": {"fixed_when": str(tmp_path / "never")}} for _ in range(3)])
        assert {o.status for o in client.wait_all(broken, 30)} == {"dead"}
        lines: list[str | None] = []
        job = client.submit("fragile", {"fixed_when": str(tmp_path)}, tenant="acme")  # would succeed: held back
        outcome = job.wait(30, watch=lambda o: lines.append(change_line(o)))
        assert outcome.status == "completed"
        held = [line for line in lines if line and line.startswith("breaker open for fragile until ")]
        assert len(held) == 1 and lines.index(held[0]) < lines.index("running (attempt 1)"), lines

        assert all(o.status == "paused" for o in client.pause_task_type("echo", reason="maintenance"))
        lines.clear()
        paused = client.submit("echo", {}, tenant="acme")
        said = "paused: task type echo is paused (maintenance)"
        assert paused.wait(30, watch=lambda o: lines.append(change_line(o)),
                           until=lambda o: change_line(o) == said).status == "queued"
        assert lines[-1] == said, lines
        client.resume_task_type("echo")
        assert paused.wait(30).status == "completed"


def test_without_projections_a_wait_sees_a_pause_written_after_the_submit(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    from engine.cli.jobs import change_line

    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    job = client.submit("echo", {}, tenant="acme", delay=2)  # scheduled: the pause comes before it is due
    client.pause_task_type("echo", reason="deploy")
    lines: list[str | None] = []
    said = "paused: task type echo is paused (deploy)"
    assert job.wait(30, watch=lambda o: lines.append(change_line(o)), until=lambda o: change_line(o) == said).status \
        == "queued"
    assert lines[-1] == said, lines
    client.resume_task_type("echo")
    assert job.wait(30).status == "completed"


def test_without_projections_a_wait_sees_a_breaker_opened_in_its_partition_after_the_submit(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    from engine.cli.jobs import change_line
    from engine.contract.ids import job_id_for_key
    from engine.contract.partitioner import partition_for

    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    job = client.submit("fragile", {"fixed_when": str(tmp_path)}, tenant="acme", delay=2)  # due once it is open
    keys = (f"k-{n}" for n in range(10_000))
    same = [key for key in keys if partition_for(job_id_for_key("acme", key), 3) == job.partition][:3]
    broken = client.submit_many([{"task_type": "fragile", "tenant": "acme", "idempotency_key": key,
                                  "payload": {"fixed_when": str(tmp_path / "never")}} for key in same])
    assert {o.status for o in client.wait_all(broken, 30)} == {"dead"}  # the third failure opens the breaker
    lines: list[str | None] = []
    assert job.wait(30, watch=lambda o: lines.append(change_line(o))).status == "completed"
    held = [line for line in lines if line and line.startswith("breaker open for fragile until ")]
    assert held and lines.index(held[0]) < lines.index("running (attempt 1)"), lines
