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
