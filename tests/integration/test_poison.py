"""Poison on a real broker: a record that makes a step raise is set aside as an event; the engine goes on."""

from __future__ import annotations

import signal
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import eventually, start_engine, verify_partition

APP = "tests.integration.poison_app:app"


def final_status(client: Client, job_id: str, timeout: float):  # type: ignore[no-untyped-def]
    """The job's outcome once final (read from the log)."""
    return eventually(lambda: (o := client.status(job_id)).done and o, timeout, f"job {job_id} to end")


def test_a_raising_step_sets_its_record_aside_and_every_other_job_completes(settings: Settings, client: Client,  # type: ignore[no-untyped-def]
                                                                             engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, app=APP)
    engine.wait_active(3)
    poison = {step: client.submit("noop", {"poison": step}, tenant="acme", delay=1.0 if step == "timer" else None)
              for step in ("decide", "start", "result", "timer")}
    good = client.submit_many([{"task_type": "noop", "payload": {"n": n}, "tenant": "acme"} for n in range(30)])

    outcomes = {step: handle.wait(60) for step, handle in poison.items()}
    assert outcomes["decide"].status == "rejected" and outcomes["decide"].reason == "engine_error"
    assert "injected poison in the decide step" in (outcomes["decide"].error or "")
    for step in ("start", "result", "timer"):
        assert outcomes[step].status == "dead" and outcomes[step].reason == "engine_error", (step, outcomes[step])
    assert "injected poison in the result step" in (outcomes["result"].error or "")
    assert all(h.wait(60).status == "completed" for h in good)
    assert engine.proc.poll() is None
    assert engine.logs().count("setting it aside") >= 4

    engine.signal(signal.SIGTERM)  # the log holds the set-aside records: a restart restores past them
    assert engine.proc.wait(30) == 0
    again = start_engine(engines, settings, "again", tmp_path, app=APP)
    again.wait_active(3)
    assert client.submit("noop", {}, tenant="acme").wait(60).status == "completed"
    for p in range(3):
        assert verify_partition(again.settings(settings), p).matches


def test_a_store_found_corrupt_while_running_is_wiped_and_restored_from_the_log(settings: Settings, client: Client,  # type: ignore[no-untyped-def]
                                                                                 engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, app="tests.integration.corrupt_app:app")
    engine.wait_active(3)
    before = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "acme"} for _ in range(20)])
    assert all(h.wait(60).status == "completed" for h in before)
    submit_corrupt_job(settings)
    after = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "acme"} for _ in range(20)])
    assert all(h.wait(60).status == "completed" for h in after)
    outcome = final_status(client, "corrupt-job", 60)
    assert outcome.status == "completed"
    assert "projection corrupt" in engine.logs() and engine.proc.poll() is None
    assert [e.event.type for e in outcome.events].count("JobSubmitted") == 1  # decided once, not twice
    for p in range(3):
        assert verify_partition(engine.settings(settings), p).matches


def test_a_rewind_the_consumer_refuses_at_first_is_tried_again_and_no_command_is_skipped(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    """The store-wiped resync rewinds the commands reader while its seeks are refused (stall_app): the reader
    tries again until the consumer takes it, so the command being decided is read again, not skipped."""
    engine = start_engine(engines, settings, "solo", tmp_path, app="tests.integration.stall_app:app")
    engine.wait_active(3)
    submit_corrupt_job(settings)
    after = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "acme"} for _ in range(20)])
    assert all(h.wait(60).status == "completed" for h in after)
    assert final_status(client, "corrupt-job", 60).status == "completed"
    logs = engine.logs()
    assert "projection corrupt" in logs and "refused" in logs and "trying again" in logs
    assert engine.proc.poll() is None


def submit_corrupt_job(settings: Settings) -> None:
    """Produce the SubmitJob of ``corrupt-job`` (the job whose record corrupt_app reports corrupt) to its partition."""
    from confluent_kafka import Producer

    from engine.commands import new_command
    from engine.contract import messages as m
    from engine.contract.codec import encode_command
    from engine.contract.partitioner import partition_for

    command = new_command("corrupt-job", "acme", m.SubmitJob("noop", m.Payload(b"{}")))
    producer = Producer({"bootstrap.servers": settings.require_bootstrap()})
    producer.produce(settings.commands_topic, encode_command(command), b"corrupt-job",
                     partition=partition_for("corrupt-job", 3))
    producer.flush(10)
