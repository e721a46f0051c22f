"""The write step against a real broker: a transaction's events land in order, and the delivery reports of its
first and last event give their offsets, also when the producer's queue fills up on the way."""

from __future__ import annotations

from confluent_kafka import Producer, TopicPartition

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event, encode_event
from engine.runtime import kafka
from engine.runtime.kafka.ports import Transaction
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Partition
from engine.runtime.loop.write import Writer, finish

EVENTS = 40


def staged_events(n: int) -> Staged:
    """``n`` events of as many jobs (some without a job id, as a claim has none), encoded."""
    staged = Staged()
    for i in range(n):
        job = f"job-{i}" if i % 7 else None
        event = m.Event(f"0-1-{i}", job, "acme" if job else None, 1, "owner-a", 1_000 + i,
                        m.JobQueued("submitted") if job else m.OwnershipClaimed(0, "owner-a"))
        staged.events.append(event)
        staged.raws.append(encode_event(event))
    return staged


def small_queue_producer(settings: Settings) -> Producer:
    """A partition owner's transactional producer whose queue holds 3 records: most produce calls find it full."""
    producer = Producer({**settings.kafka_config(), "transactional.id": f"{settings.namespace}.write-step",
                         "enable.idempotence": True, "acks": "all", "linger.ms": 1,
                         "queue.buffering.max.messages": 3})
    producer.init_transactions(30)
    return producer


def read_back(settings: Settings, count: int) -> list[tuple[int, m.Event]]:
    consumer = kafka.events_reader(settings, "write-step")
    consumer.assign([TopicPartition(settings.events_topic, 0, 0)])
    out: list[tuple[int, m.Event]] = []
    try:
        for _ in range(100):
            out += [(msg.offset(), decode_event(msg.value())) for msg in consumer.consume(100, 0.2) if not msg.error()]
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return out


def test_a_transaction_lands_in_order_with_its_first_and_last_offsets(settings: Settings) -> None:
    partition = Partition(0, "owner-a")
    producer = small_queue_producer(settings)
    partition.producer = Transaction(producer)
    staged = staged_events(EVENTS)
    writer = Writer(settings.events_topic, settings.commands_topic, 1)
    try:
        written = finish(writer.launch(partition, staged, None, lambda: None))
    finally:
        writer.close()
    assert written.error is None
    landed = read_back(settings, EVENTS)
    assert [e.event_id for _, e in landed] == [e.event_id for e in staged.events]
    assert [e.job_id for _, e in landed] == [e.job_id for e in staged.events]
    assert (written.first, written.last) == (landed[0][0], landed[-1][0])
    producer.flush(10)
