"""Bad input on a real broker: each is a clear, recorded rejection; the engine keeps running."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.runtime.joblog import scan_partition, with_fencing
from engine.contract.codec import decode_event_at
from engine.runtime import kafka
from tests.integration.conftest import start_engine


def partition_events(settings: Settings, p: int) -> list[m.Event]:
    consumer = kafka.events_reader(settings, "test")
    try:
        return [decode_event_at(v, settings.events_topic, p, o)
                for o, _, v in scan_partition(consumer, settings.events_topic, p)]
    finally:
        consumer.close()


def test_bad_input_is_recorded_and_nothing_else_is_lost(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)

    producer = Producer({"bootstrap.servers": settings.require_bootstrap()})
    for raw in (b"not avro at all", b"\xc3\x01" + b"\x00" * 8 + b"junk", b""):
        producer.produce(settings.commands_topic, raw, b"garbage", partition=1)
    producer.flush(10)

    unknown = client.submit("no.such.task", {}, tenant="acme").wait(30)
    assert unknown.status == "rejected" and unknown.reason == "unknown_task_type"
    assert "no.such.task" in unknown.error

    too_big = client.submit("echo", {"blob": "x" * (600 * 1024)}, tenant="acme").wait(30)
    assert too_big.status == "rejected" and too_big.reason == "payload_too_large"

    invalid = client.submit("email.send", {"to": "a@b.c"}, tenant="acme").wait(30)
    assert invalid.status == "dead" and invalid.reason == "validation_failed" and invalid.attempts == 1
    assert "subject" in invalid.error

    fine = client.submit("email.send", {"to": "a@b.c", "subject": "hi"}, tenant="acme").wait(30)
    assert fine.status == "completed" and fine.result == {"sent_to": "a@b.c"}

    quarantined = [e.body for e in partition_events(settings, 1) if isinstance(e.body, m.CommandQuarantined)]
    assert len(quarantined) == 3
    assert {q.raw for q in quarantined} == {b"not avro at all", b"\xc3\x01" + b"\x00" * 8 + b"junk", b""}
    assert all(q.topic == settings.commands_topic and q.partition == 1 and q.error for q in quarantined)
    assert engine.proc.poll() is None
