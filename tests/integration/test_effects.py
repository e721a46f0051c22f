"""ctx.produce: a handler's records are written in the transaction that records its success (real broker)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from engine.client import Client
from engine.config import Settings
from engine.runtime.topics import admin_for, describe_topics
from tests.integration.conftest import events_by_job, start_engine

APP = "tests.integration.effects_app:app"


def make_topic(settings: Settings, name: str, partitions: int = 3, **config: str) -> str:
    """Create a user topic for handlers to produce to."""
    admin = admin_for(settings)  # held until the answer is in: a collected client cancels its requests
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    for future in futures.values():
        future.result(30)
    return name


def committed_records(settings: Settings, topic: str, partitions: int = 3) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every committed record of ``topic``, read_committed, up to its end now."""
    consumer = Consumer({**settings.kafka_config(), "group.id": f"{topic}.check",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[bytes | None, bytes]] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 30
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error():
                    continue
                out.append((msg.key(), msg.value()))
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            done |= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
        return out
    finally:
        consumer.close()


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_records_commit_with_success_only_and_bad_records_fail_their_attempt(
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = make_topic(settings, f"out.{settings.namespace}")
    small = make_topic(settings, f"small.{settings.namespace}", 1, **{"max.message.bytes": "2000"})
    engine = start_engine(engines, settings, "a", tmp_path, app=APP)
    engine.wait_active(3)
    good = client.submit_many([{"task_type": "emit", "payload": {"topic": out}, "tenant": "acme"} for _ in range(20)])
    failing = client.submit("emit", {"topic": out, "fail": True}, tenant="acme")
    missing = client.submit("emit.once", {"topic": f"nowhere.{settings.namespace}"}, tenant="acme")
    too_big = client.submit("emit.once", {"topic": out, "size": 2_000_000}, tenant="acme")
    over_limit = client.submit("emit.once", {"topic": small, "size": 5000}, tenant="acme")
    beside = client.submit_many([{"task_type": "emit.async", "payload": {"topic": small, "size": 10},
                                  "tenant": "acme"} for _ in range(5)])

    assert all(h.wait(60).status == "completed" for h in [*good, *beside])
    over_end = over_limit.wait(60)
    assert over_end.status == "dead" and "max.message.bytes" in over_end.error, over_end.error
    assert failing.wait(60).status == "dead"
    missing_end = missing.wait(60)
    assert missing_end.status == "dead" and "does not exist" in missing_end.error, missing_end.error
    big_end = too_big.wait(60)
    assert big_end.status == "dead" and "fit in one Kafka record" in big_end.error, big_end.error

    records = committed_records(settings, out)
    assert sorted(k for k, _ in records) == sorted(h.job_id.encode() for h in good)  # one each, none of the failure
    assert all(json.loads(v)["job_id"] == k.decode() for k, v in records if k)
    assert sorted(k for k, _ in committed_records(settings, small, 1)) == sorted(h.job_id.encode() for h in beside)
    assert "Traceback" not in engine.logs()


def test_a_handler_cannot_write_the_namespace_s_own_topics_whatever_the_acls_say(
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The engine's principal may write <ns>.events (no ACLs here at all): a handler forwarding a caller's topic
    must still not get a record in, or it could forge any job's events."""
    engine = start_engine(engines, settings, "a", tmp_path, app=APP)
    engine.wait_active(3)
    forged = {topic: client.submit("emit", {"topic": topic}, tenant="acme")
              for topic in (settings.events_topic, settings.commands_topic, settings.schemas_topic)}
    for topic, handle in forged.items():
        end = handle.wait(60)
        assert end.status == "dead", (topic, end)
        assert f"topic {topic} is a topic of namespace {settings.namespace}: only the engine writes it" in end.error
        assert end.attempts == 1, end  # refused for good, not retried
    partitions = {i.name: i.partitions for i in describe_topics(settings)}
    for topic in forged:
        values = [v for _, v in committed_records(settings, topic, partitions[topic])]
        assert values and not [v for v in values if v.startswith(b'{"job_id"')], topic  # nothing of the handler's
    assert "Traceback" not in engine.logs()


def test_a_record_the_broker_refuses_in_the_transaction_fails_its_attempt_only(
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = make_topic(settings, f"out.{settings.namespace}")
    shrinking = make_topic(settings, f"shrinking.{settings.namespace}", 1)
    engine = start_engine(engines, settings, "a", tmp_path, app=APP)
    engine.wait_active(3)
    assert client.submit("emit.once", {"topic": shrinking, "size": 5000}, tenant="acme").wait(60).status == "completed"
    set_max_message_bytes(settings, shrinking, 2000)  # after the engine checked the topic: only the broker knows
    refused = client.submit("emit.once", {"topic": shrinking, "size": 5000}, tenant="acme")
    beside = client.submit_many([{"task_type": "emit", "payload": {"topic": out}, "tenant": "acme"}
                                 for _ in range(30)])
    end = refused.wait(60)
    assert end.status == "dead" and "MSG_SIZE_TOO_LARGE" in end.error, end.error
    assert all(h.wait(60).status == "completed" for h in beside)
    assert sorted(k for k, _ in committed_records(settings, out)) == sorted(h.job_id.encode() for h in beside)
    assert len(committed_records(settings, shrinking, 1)) == 1  # the first job's


def set_max_message_bytes(settings: Settings, topic: str, limit: int) -> None:
    """Set ``topic``'s max.message.bytes and wait until the broker says so."""
    admin = admin_for(settings)
    entry = ConfigEntry("max.message.bytes", str(limit), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)

    def applied() -> bool:
        found = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        return next(iter(found.values())).result(10)["max.message.bytes"].value == str(limit)
    wait_for(applied, 30, "the topic's new limit")


def test_kill_minus_nine_leaves_exactly_one_committed_record_per_job(
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = make_topic(settings, f"out.{settings.namespace}")
    a = start_engine(engines, settings, "a", tmp_path, app=APP)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path, app=APP)
    b.wait_active(1)
    handles = client.submit_many([{"task_type": "emit", "payload": {"topic": out, "seconds": 0.05},
                                   "tenant": f"t{i % 4}"} for i in range(600)])
    marks = tmp_path / "marks" / "emit.log"
    wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) >= 150, 120, "jobs to run")
    a.signal(signal.SIGKILL)
    ids = {h.job_id for h in handles}

    def all_succeeded() -> bool:
        ended = {job_id for job_id, events in events_by_job(settings).items() if job_id in ids and any(
            e.event.type == "JobSucceeded" and not e.fenced for e in events)}
        return ended == ids

    wait_for(all_succeeded, 240, "every job to succeed")
    records = committed_records(settings, out)
    keys = [k.decode() for k, _ in records if k]
    assert len(records) == 600 and set(keys) == ids, (len(records), len(set(keys)))
    runs: dict[str, int] = {}
    for line in marks.read_text().splitlines():
        runs[line.split()[0]] = runs.get(line.split()[0], 0) + 1
    assert any(n > 1 for n in runs.values()), "no handler ran twice: the kill came too late to test anything"
    assert b.stop() == 0
