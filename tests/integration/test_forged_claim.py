"""A forged OwnershipClaimed far ahead of the owner's epoch, written straight to <ns>.events (what the
ACLs of docs/security.md forbid, done here without them): it counts for nothing, the engine keeps
running its partitions and says so at ERROR, and a rebuild agrees with the live store."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import encode_event
from engine.contract.partitioner import partition_for
from tests.integration.conftest import start_engine, verify_partition


def test_a_forged_claim_neither_fences_the_owner_nor_stalls_its_jobs(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    first = client.submit("echo", {"n": 1}, tenant="acme")
    assert first.wait(30).status == "completed"
    p = partition_for(first.job_id, 3)
    forged = m.Event("forged-1", None, None, 101, "mallory", 1, m.OwnershipClaimed(p, "mallory"))
    producer = Producer(settings.kafka_config())
    producer.produce(settings.events_topic, encode_event(forged), None, partition=p)
    assert producer.flush(10) == 0

    later = [client.submit("echo", {"n": n}, tenant="acme") for n in range(2, 12)]
    outcomes = [h.wait(60) for h in later]
    assert [o.status for o in outcomes] == ["completed"] * 10, engine.logs()[-3000:]
    logs = engine.logs()
    assert "does not count" in logs and "'mallory'" in logs and "ERROR" in logs, logs[-3000:]
    assert engine.proc.poll() is None
    history = [h for h in client.status(first.job_id).events]
    assert history and all(not h.fenced for h in history)  # the real owner's events still count
    assert engine.stop() == 0
    for partition in range(3):
        assert verify_partition(engine.settings(settings), partition).matches


def test_readers_fold_forged_events_as_the_owner_does_and_the_view_counts_what_it_ignored(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    """Records at the owner's own epoch, written by anyone with WRITE on the log (an old engine, too broad an
    ACL): a JobCancelled after the job completed, a JobSucceeded for a job not started; and one at a stale epoch."""
    from engine.questions.view_status import view_status
    from tests.integration.conftest import eventually

    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    done = client.submit("echo", {"n": 1}, tenant="acme")
    assert done.wait(30).status == "completed"
    later = client.submit("echo", {"n": 2}, tenant="globex", delay=3600)
    assert later.wait(30, until=lambda o: o.status == "scheduled").status == "scheduled"
    epoch = client.status(done.job_id).events[-1].event.epoch
    forged = [m.Event("forged-1", done.job_id, "acme", epoch, "solo", 1, m.JobCancelled("forged")),
              m.Event("forged-2", later.job_id, "globex", epoch, "solo", 1, m.JobSucceeded(1, 5, b'"forged"')),
              m.Event("forged-3", done.job_id, "acme", epoch + 7, "mallory", 1, m.JobCancelled("stale"))]
    producer = Producer(settings.kafka_config())
    for event in forged:
        producer.produce(settings.events_topic, encode_event(event), event.job_id,
                         partition=partition_for(event.job_id or "", 3))
    assert producer.flush(10) == 0
    assert client.submit("echo", {"n": 3}, tenant="acme").wait(30).status == "completed"  # the owner goes on

    first, second = client.status(done.job_id), client.status(later.job_id)
    assert (first.status, first.result["payload"]) == ("completed", {"n": 1}), first  # readers agree with the owner
    assert (second.status, second.result) == ("scheduled", None), second
    assert first.ignored == second.ignored == 1
    own = engine.settings(settings)

    def counted() -> dict[str, int]:
        status = view_status(own)
        kinds: dict[str, int] = {}
        for p in status.partitions:
            for kind, n in p.aside.items():
                kinds[kind] = kinds.get(kind, 0) + n
        assert status.lag == 0 and kinds["ignored"] == 2 and kinds["fenced"] == 1, kinds
        return kinds
    assert eventually(counted, 30, "the view to count what it ignored")["fenced_claim"] == 0
    assert engine.stop() == 0
    for partition in range(3):
        assert verify_partition(own, partition).matches


def test_a_wait_fences_with_the_view_s_claim_not_with_a_forged_first_record(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    """A wait reads from an offset taken before its submit: mid-log. A forged record of the job at another epoch,
    read first, used to stand in for the claim, fencing every real event of the job (the wait never ended)."""
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    assert client.submit("echo", {"n": 0}, tenant="acme").wait(30).status == "completed"
    assert engine.stop() == 0  # its view store stays in its state directory, folded this far
    with Client(engine.settings(settings)) as reader:  # a process beside that view (a CLI, the console)
        handle = reader.submit("echo", {"n": 1}, tenant="acme")  # decided by no one yet
        forged = m.Event("forged-1", handle.job_id, "acme", 99, "mallory", 1, m.JobQueued("submitted"))
        producer = Producer(settings.kafka_config())
        producer.produce(settings.events_topic, encode_event(forged), handle.job_id,
                         partition=partition_for(handle.job_id, 3))
        assert producer.flush(10) == 0
        start_engine(engines, settings, "solo", tmp_path).wait_active(3)
        outcome = handle.wait(60)
    assert outcome.status == "completed", outcome
    assert [e.fenced for e in outcome.events if e.event.epoch == 99] == [True]
