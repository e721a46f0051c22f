"""Commands as any producer can send them (no client-side checks), and the events the engine decided on them."""

from __future__ import annotations

from confluent_kafka import Producer

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at, encode_command
from engine.contract.partitioner import partition_for
from engine.runtime import kafka
from engine.questions.history import scan_partition
from tests.integration.conftest import eventually


def partition_events(settings: Settings, p: int) -> list[m.Event]:
    """Every event of partition ``p`` of ``<ns>.events``, in log order."""
    consumer = kafka.events_reader(settings, "test")
    try:
        return [decode_event_at(v, settings.events_topic, p, o)
                for o, _, v in scan_partition(consumer, settings.events_topic, p)]
    finally:
        consumer.close()


def produce_raw(settings: Settings, commands: list[m.Command]) -> None:
    """What any producer can send: well-formed Avro, to the job's partition, with no client-side checks."""
    producer = Producer({"bootstrap.servers": settings.require_bootstrap(), "acks": "all"})
    for command in commands:
        producer.produce(settings.commands_topic, encode_command(command), command.job_id.encode(),
                         partition=partition_for(command.job_id, 3))
    assert producer.flush(10) == 0


def decided(settings: Settings, command: m.Command, timeout: float = 30.0) -> list[m.Event]:
    """The events the engine wrote because of ``command`` (its causation id), once there are any."""
    p = partition_for(command.job_id, 3)
    return eventually(lambda: [e for e in partition_events(settings, p) if e.causation_id == command.command_id],
                      timeout, f"a decision on {command.body}", every=0.5)


def job_events_eventually(settings: Settings, job_id: str, timeout: float = 30.0) -> list[m.Event]:
    """The job's events on its partition, once there are any."""
    p = partition_for(job_id, 3)
    return eventually(lambda: [e for e in partition_events(settings, p) if e.job_id == job_id],
                      timeout, f"an event of job {job_id}", every=0.5)
