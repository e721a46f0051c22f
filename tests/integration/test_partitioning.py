"""A real producer puts every job's records where partition_for says, and they decode back."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from engine.contract.codec import decode_command_at, encode_command
from engine.contract.ids import job_id_for_key, new_command_id, new_job_id
from engine.contract.messages import Command, Payload, SubmitJob
from engine.contract.partitioner import partition_for

PARTITIONS = 6
KEYS = 200
DEADLINE_S = 30.0


def sample_keys() -> list[str]:
    """Random and derived job ids, plus keys of every tail length and non-ASCII ones."""
    keys = [new_job_id() for _ in range(KEYS // 2)]
    keys += [job_id_for_key("tenant-a", f"order-{i}") for i in range(KEYS // 4)]
    keys += [f"k{'x' * (i % 9)}-{i}-ü" for i in range(KEYS - len(keys))]
    return keys


def submit(job_id: str) -> Command:
    return Command(new_command_id(), job_id, "tenant-a", 1_700_000_000_000_000,
                   SubmitJob("email.send", Payload(job_id.encode())))


def produce(bootstrap: str, topic: str, keys: list[str]) -> dict[str, int]:
    """Produce one SubmitJob per key with librdkafka's murmur2; the partitions the broker acked."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "partitioner": "murmur2_random", "linger.ms": 5})
    acked: dict[str, int] = {}

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        acked[msg.key().decode()] = msg.partition()

    for key in keys:
        producer.produce(topic, encode_command(submit(key)), key=key.encode(), on_delivery=delivered)
    assert producer.flush(DEADLINE_S) == 0
    return acked


def consume(bootstrap: str, topic: str, expected: int) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    messages: list[Message] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                messages.append(msg)
    finally:
        consumer.close()
    return messages


def test_murmur2_random_producer_agrees_with_partition_for(
    bootstrap: str, kafka_admin: AdminClient, unique_ns: str,
) -> None:
    topic = f"{unique_ns}.commands"
    kafka_admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=DEADLINE_S)
    keys = sample_keys()

    acked = produce(bootstrap, topic, keys)

    assert len(acked) == len(keys)
    wrong = {k: (p, partition_for(k, PARTITIONS)) for k, p in acked.items() if p != partition_for(k, PARTITIONS)}
    assert wrong == {}
    assert len(set(acked.values())) == PARTITIONS  # 200 keys reach every partition
    stored = consume(bootstrap, topic, len(keys))
    assert len(stored) == len(keys)
    for msg in stored:
        command = decode_command_at(msg.value(), msg.topic(), msg.partition(), msg.offset())
        assert command.job_id == msg.key().decode()
        assert msg.partition() == partition_for(command.job_id, PARTITIONS)
