"""Schema evolution in practice: v1 and v2 command producers interleaved against a real engine."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from engine.client import Client, JobHandle
from engine.config import Settings
from engine.contract.codec import COMMAND_BODIES, MessageCodec, SchemaCatalog, catalog, decode_command
from engine.contract.ids import new_command_id, new_job_id
from engine.contract.messages import Command, Payload, SubmitJob
from engine.contract.partitioner import partition_for
from engine.runtime import kafka
from engine.questions.history import job_events, scan_partition
from tests.integration.conftest import start_engine

JOBS = 12


def codec_for(version: int) -> MessageCodec[Command]:
    """A command codec that writes (and reads) only up to schema ``version``: a producer of that era."""
    versions = [v for v in catalog("command").versions if v.version <= version]
    return MessageCodec(SchemaCatalog("command", versions), Command, COMMAND_BODIES)


def submit_command(i: int, version: int) -> Command:
    labels = {"batch": "b7", "index": str(i)} if version >= 2 else {}
    payload = Payload(json.dumps({"i": i, "schema": version}).encode())
    return Command(new_command_id(), new_job_id(), f"tenant-{i % 3}", time.time_ns() // 1000,
                   SubmitJob("echo", payload, labels=labels))


def commands_on_the_log(settings: Settings) -> list[bytes]:
    consumer = kafka.events_reader(settings, "test-commands")
    try:
        return [value for p in range(3) for _, _, value in scan_partition(consumer, settings.commands_topic, p)]
    finally:
        consumer.close()


def test_v1_and_v2_producers_interleaved_all_complete(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    v1, v2 = codec_for(1), codec_for(2)
    assert (v1.catalog.current.version, v2.catalog.current.version) == (1, 2)
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)

    producer = kafka.command_producer(settings)
    sent: list[tuple[Command, int]] = []
    for i in range(JOBS):
        version = 1 if i % 2 == 0 else 2
        command = submit_command(i, version)
        raw = (v1 if version == 1 else v2).encode(command)
        producer.produce(settings.commands_topic, raw, command.job_id.encode(),
                         partition=partition_for(command.job_id, 3))
        sent.append((command, version))
    assert producer.flush(30) == 0

    for command, version in sent:
        outcome = JobHandle(client, command.job_id, partition_for(command.job_id, 3), 0).wait(30)
        assert outcome.status == "completed", (version, outcome, engine.logs()[-2000:])
        assert outcome.result["payload"] == json.loads(command.body.payload.data)  # type: ignore[union-attr]
        history = job_events(settings, command.job_id)
        assert [e.event.type for e in history] == ["JobSubmitted", "JobQueued", "JobStarted", "JobSucceeded"]
        assert history[0].event.body.payload == command.body.payload  # type: ignore[union-attr]

    on_log = commands_on_the_log(settings)
    assert Counter(raw[:10] for raw in on_log) == {v1.catalog.current.header: JOBS // 2,
                                                  v2.catalog.current.header: JOBS // 2}
    labels = sorted((decode_command(raw).body.labels.get("index", "-")) for raw in on_log)  # type: ignore[union-attr]
    assert labels == sorted(["-"] * (JOBS // 2) + [str(i) for i in range(1, JOBS, 2)])

