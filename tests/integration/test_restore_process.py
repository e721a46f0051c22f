"""A partition whose store lacks many events is restored by a process of its own, against a real broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import encode_event
from engine.contract.partitioner import partition_for
from tests.integration.conftest import start_engine

JOBS = 1500
DAY_US = 86_400 * 1_000_000


def write_held_jobs(settings: Settings, jobs: int, partitions: int = 3) -> int:
    """A claim per partition, then ``jobs`` jobs held for a month, as an owner of epoch 1 writes them."""
    producer = Producer({"bootstrap.servers": settings.require_bootstrap(), "linger.ms": 20, "acks": "all"})
    now, seqs, count = time.time_ns() // 1000, [0] * partitions, 0
    for p in range(partitions):
        claim = m.Event(f"{p}-1-0", None, None, 1, "seed", now, m.OwnershipClaimed(p, "seed"))
        producer.produce(settings.events_topic, encode_event(claim), partition=p)
    for n in range(jobs):
        job_id, due = f"held-{n:06d}", now + 30 * DAY_US + n
        p = partition_for(job_id, partitions)
        for body in (m.JobSubmitted("echo", m.Payload(b"{}"), 5, "NORMAL", 3, due), m.JobScheduled(due)):
            seqs[p] += 1
            event = m.Event(f"{p}-1-{seqs[p]}", job_id, "acme", 1, "seed", now, body)
            producer.produce(settings.events_topic, encode_event(event), key=job_id.encode(), partition=p)
            count += 1
    assert producer.flush(30) == 0
    return count


def test_a_long_restore_runs_in_processes_and_the_store_is_what_a_rebuild_makes(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    written = write_held_jobs(settings, JOBS)
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--restore-process-min", "500"))
    engine.wait_active(3, timeout=120)
    logs = engine.logs()
    in_processes = min(3, os.cpu_count() or 1)  # one per core at a time; the loop restores the rest itself
    assert logs.count("a process of its own restores them") == in_processes, logs[-3000:]
    assert logs.count("restore process done") == in_processes, logs[-3000:]
    assert client.status("held-000007").status == "scheduled"
    assert client.submit("echo", {"after": "restore"}, tenant="acme").wait(30).status == "completed"

    assert engine.stop() == 0
    cli = [sys.executable, "-m", "engine.cli.main", "projections", "rebuild", "--all", "--verify", "--bootstrap",
           settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir", str(engine.state_dir)]
    checked = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and checked.stdout.count(": match") == 3, checked.stdout + checked.stderr
    assert written == 2 * JOBS
