"""Namespaces for the schema-registry tests: one written by today's engine, one written with v1.

Shared by the Python reader test (test_schema_registry.py) and the consumers in other languages
(test_consumers.py), which must all read both.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.contract.codec import EVENT_BODIES, MessageCodec, SchemaCatalog, catalog
from engine.contract.ids import new_job_id, new_uuid4s
from engine.contract.learned import skipped_line
from engine.contract.messages import (
    Event,
    JobQueued,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
    OwnershipClaimed,
    Payload,
)
from engine.contract.partitioner import partition_for
from engine.errors import UnknownTypeError
from engine.runtime import kafka
from engine.questions.history import scan_partition
from tests.integration.conftest import EngineProcess, start_engine

JOBS = 6
LIFE = ["JobSubmitted", "JobQueued", "JobStarted", "JobSucceeded"]
NEWER_TYPES = {"TaskTypePaused", "RateLimitSet"}
"""Types today's engine writes in :func:`write_today` that a v1 reader does not have (v3 and v4)."""


def write_today(settings: Settings, client: Client, engines: list[EngineProcess], tmp: Path) -> list[str]:
    """Run JOBS echo jobs to completion under today's engine, after a pause and a rate limit; the job ids.

    (The pause and the limit stay: resuming would be answered under the same envelope ids, and
    waiting for *its* events is not what the client's wait does.)"""
    engine = start_engine(engines, settings, "today", tmp)
    engine.wait_active(3)
    client.pause_task_type("otp")
    client.set_rate_limit("otp", "5/s")
    handles = [client.submit("echo", {"i": i}, tenant=f"tenant-{i % 2}") for i in range(JOBS)]
    for h in handles:
        assert h.wait(30).status == "completed", engine.logs()[-2000:]
    return [h.job_id for h in handles]


def write_v1(settings: Settings, partitions: int = 3) -> list[str]:
    """Append a claim per partition and JOBS jobs' lives to ``<ns>.events``, every record written with event v1."""
    v1 = MessageCodec(SchemaCatalog("event", catalog("event").versions[:1]), Event, EVENT_BODIES)
    assert v1.catalog.current.version == 1
    producer = kafka.command_producer(settings)
    now = time.time_ns() // 1000
    ids = new_uuid4s(JOBS * 4 + partitions)
    for p in range(partitions):
        claim = Event(ids.pop(), None, None, 1, "v1-writer", now, OwnershipClaimed(p, "v1-writer"))
        producer.produce(settings.events_topic, v1.encode(claim), b"", partition=p)
    jobs = [new_job_id() for _ in range(JOBS)]
    for i, job in enumerate(jobs):
        payload = Payload(json.dumps({"i": i}).encode())
        bodies = [JobSubmitted("echo", payload, 5, "NORMAL", 3), JobQueued("submitted"),
                  JobStarted(1, now, "v1-writer"), JobSucceeded(1, 1000, b'{"ok": true}')]
        for body in bodies:
            event = Event(ids.pop(), job, f"tenant-{i % 2}", 1, "v1-writer", now, body)
            producer.produce(settings.events_topic, v1.encode(event), job.encode(), partition=partition_for(job, 3))
    assert producer.flush(30) == 0
    return jobs


def read_with(settings: Settings, codec: MessageCodec[Event], partitions: int = 3) -> tuple[
        dict[str, list[str]], Counter[str]]:
    """Every job's event types read with ``codec`` (a reader of one era), and the types it skipped."""
    types: dict[str, list[str]] = {}
    skipped: Counter[str] = Counter()
    consumer = kafka.events_reader(settings, "test-era")  # installs <ns>.schemas as a schema source
    try:
        for p in range(partitions):
            for offset, _, value in scan_partition(consumer, settings.events_topic, p):
                try:
                    event = codec.decode_at(value, settings.events_topic, p, offset)
                except UnknownTypeError as e:
                    skipped[e.type_name] += 1
                    continue
                if event.job_id:
                    types.setdefault(event.job_id, []).append(event.type)
    finally:
        consumer.close()
    if skipped:
        print(skipped_line(skipped))
    return types, skipped
