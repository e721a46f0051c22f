"""How fast one process folds a partition's log into a fresh store: the restore and rebuild rate.

Writes a synthetic but valid event log into one partition of a fresh namespace (an
ownership claim, then jobs: half of them held for the future — ``JobSubmitted``,
``JobScheduled`` — and half finished — ``JobSubmitted``, ``JobQueued``, ``JobStarted``,
``JobSucceeded``), then times, alternating runs: reading the records from Kafka alone,
reading and decoding them, and the whole rebuild (``projections.rebuild.rebuild_into``, the
restorer a live owner uses too). Prints events/s per stage and the medians.

Usage: python bench/restore_rate.py [--jobs 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer

from bench.harness import fresh_settings, local_broker, median
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at, encode_event
from engine.runtime import kafka
from projections.rebuild import rebuild_into

DAY_US = 86_400_000_000
PAYLOAD = m.Payload(b'{"to": "someone@example.com", "template": "welcome"}')


def job_events(n: int, now: int) -> list[m.Event]:
    """The ``n``-th job's events (times in µs from ``now``): held for a day when ``n`` is even, finished when odd."""
    job_id, tenant, owner = f"job-{n:09d}", f"tenant-{n % 100}", "bench-owner"
    seq = n * 4

    def event(body: m.EventBody, i: int) -> m.Event:
        return m.Event(f"0-1-{seq + i}", job_id, tenant, 1, owner, now + n, body)

    if n % 2 == 0:
        due = now + DAY_US + n * 1000
        return [event(m.JobSubmitted("email.send", PAYLOAD, 5, "normal", 3, due), 0),
                event(m.JobScheduled(due), 1)]
    return [event(m.JobSubmitted("email.send", PAYLOAD, 5, "normal", 3), 0),
            event(m.JobQueued("submitted"), 1),
            event(m.JobStarted(1, now + n, "bench-owner"), 2),
            event(m.JobSucceeded(1, 150, b'{"ok": true}'), 3)]


def write_log(settings: Settings, jobs: int) -> int:
    """Produce the synthetic log into partition 0 of the events topic; how many events."""
    producer = Producer({"bootstrap.servers": settings.require_bootstrap(), "linger.ms": 20,
                         "batch.size": 1_000_000, "compression.type": "lz4", "acks": "all"})
    now = time.time_ns() // 1000
    claim = m.Event("0-1-claim", None, None, 1, "bench-owner", now, m.OwnershipClaimed(0, "bench-owner"))
    producer.produce(settings.events_topic, encode_event(claim), partition=0)
    count = 1
    for n in range(jobs):
        for event in job_events(n, now):
            while True:
                try:
                    producer.produce(settings.events_topic, encode_event(event), key=event.job_id.encode(),
                                     partition=0)
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
    producer.flush()
    return count


def read_only(settings: Settings, decode: bool) -> int:
    """Read every record of partition 0 (and decode it when ``decode``); how many."""
    with kafka.KafkaLog(settings, f"bench-read-{time.time_ns()}") as log:
        topic = settings.events_topic
        end = log.end_offset(topic, 0)
        n = 0
        for offset, value in log.records(topic, 0, 0, end):
            if decode:
                decode_event_at(value, topic, 0, offset)  # type: ignore[arg-type]
            n += 1
        return n


def rebuild(settings: Settings) -> int:
    """Fold the partition into a fresh store; how many records."""
    path = Path(tempfile.mkdtemp(prefix="epochq-restore-bench-")) / "store"
    try:
        with kafka.KafkaLog(settings, f"bench-rebuild-{time.time_ns()}") as log:
            store = rebuild_into(log, settings.events_topic, 0, path)
            applied = store.applied_offset()
            store.close()
        return applied + 1
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def timed(what: Callable[[], int]) -> tuple[float, float]:
    """(records per second, CPU µs per record) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    n = what()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return n / wall, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with local_broker() as bootstrap:
        settings = fresh_settings(bootstrap, partitions=1)
        started = time.perf_counter()
        events = write_log(settings, args.jobs)
        print(f"wrote {events:,} events for {args.jobs:,} jobs in {time.perf_counter() - started:.1f} s")
        stages: dict[str, Callable[[], int]] = {
            "read": lambda: read_only(settings, decode=False),
            "read + decode": lambda: read_only(settings, decode=True),
            "rebuild (read, decode, fold, write)": lambda: rebuild(settings),
        }
        rates: dict[str, list[float]] = {name: [] for name in stages}
        for run in range(1, args.runs + 1):
            for name, stage in stages.items():
                rate, cpu = timed(stage)
                rates[name].append(rate)
                print(f"run {run}: {name:<38} {rate:>10,.0f} events/s  {cpu:6.1f} µs CPU/event")
        print(f"medians over {args.runs} run(s) of {events:,} events:")
        for name, values in rates.items():
            print(f"  {name:<38} {median(values):>10,.0f} events/s")


if __name__ == "__main__":
    main()
