"""How long partitions stall when their engine dies: takeover with no local state, and with --standby.

A fresh namespace (6 partitions) gets a log holding ``--jobs`` jobs, half of them held for the
next 30 days and half finished, written straight to the events topic as the events an owner
writes (an ownership claim, then ``JobSubmitted``/``JobScheduled`` or the four events of a
finished job), so that setting up a million jobs takes a minute, not the engine's acceptance
time. Then, for each case:

1. engine A starts with an empty state directory and restores every partition (printed as
   the restore rate: events folded per second of the restore);
2. engine B starts with an empty state directory (plus ``--standby`` in the second case) and
   takes its share; in the standby case the bench waits until B's copies of A's partitions
   caught up;
3. A is killed with ``kill -9``; from then on a no-op probe job is submitted every 100 ms;
   the takeover time of each of A's partitions is the first probe ``JobStarted`` there, less
   the time of the kill.

Every engine runs ``epochq engine run bench.apps:app`` with default settings (the group's
session timeout is 6 s: no takeover can be faster than that).

Usage: python bench/takeover.py [--jobs 1000000] [--cases plain,standby]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer, TopicPartition

from bench.harness import ROOT, fresh_settings, local_broker
from bench.restore_rate import job_events
from engine.client import Client
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at, encode_event
from engine.contract.partitioner import partition_for
from engine.runtime import kafka
from engine.questions.stores import partition_dirs, read_store

PARTITIONS = 6


def write_log(settings: Settings, jobs: int, number: Callable[[int], int] = lambda n: n) -> int:
    """The held namespace: a claim per partition, then every job's events in its own partition
    (job ``n`` is ``bench.restore_rate.job_events(number(n))``: odd numbers are finished jobs)."""
    producer = Producer({"bootstrap.servers": settings.require_bootstrap(), "linger.ms": 20,
                         "batch.size": 1_000_000, "compression.type": "lz4", "acks": "all"})
    now, topic, count = time.time_ns() // 1000, settings.events_topic, 0
    seqs = [0] * PARTITIONS

    def produce(p: int, event: m.Event, key: bytes | None) -> None:
        while True:
            try:
                producer.produce(topic, encode_event(event), key=key, partition=p)
                return
            except BufferError:
                producer.poll(0.05)

    for p in range(PARTITIONS):
        produce(p, m.Event(f"{p}-1-claim", None, None, 1, "seed", now, m.OwnershipClaimed(p, "seed")), None)
        count += 1
    for n in range(jobs):
        events = job_events(number(n), now)
        p = partition_for(events[0].job_id, PARTITIONS)  # type: ignore[arg-type]
        for event in events:
            seqs[p] += 1
            event = m.Event(f"{p}-1-{seqs[p]}", event.job_id, event.tenant_id, 1, "seed", event.occurred_at, event.body)
            produce(p, event, event.job_id.encode())  # type: ignore[union-attr]
            count += 1
    producer.flush()
    return count


class Engine:
    """``epochq engine run bench.apps:app`` in a process of its own, with a fresh state directory."""

    def __init__(self, settings: Settings, name: str, *flags: str):
        self.name = name
        self.state = Path(tempfile.mkdtemp(prefix=f"epochq-takeover-{name}-"))
        self.log_path = self.state / "engine.log"
        self.log = open(self.log_path, "w")
        cmd = [sys.executable, "-m", "engine.cli.main", "engine", "run", "bench.apps:app", "--bootstrap",
               settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir", str(self.state),
               "--owner-id", name, *flags]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ})

    def owned(self) -> set[int]:
        """Partitions whose newest ownership line in this engine's log says active."""
        last: dict[int, str] = {}
        for p, what in re.findall(r"partition (\d+): (active at|handed back|dropped)", self.log_path.read_text()):
            last[int(p)] = what
        return {p for p, what in last.items() if what == "active at"}

    def applied(self, settings: Settings) -> dict[int, int]:
        """The applied offset of each store in this engine's state directory."""
        mine = settings.model_copy(update={"state_dir": str(self.state)})
        out = {}
        for p, path in partition_dirs(mine):
            try:
                with read_store(path) as store:
                    out[p] = store.applied_offset()
            except Exception:  # noqa: BLE001 - being created right now
                continue
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def wait(predicate, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``predicate()``; TimeoutError after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def probe_starts(settings: Settings, client: Client, partitions: set[int], since_us: int,
                 timeout: float) -> dict[int, int]:
    """Submit a probe every 100 ms until each of ``partitions`` started one; their first start times (µs)."""
    firsts: dict[int, int] = {}
    stop = threading.Event()

    def submit() -> None:
        while not stop.is_set():
            client.submit("noop", {}, tenant="probe")
            time.sleep(0.1)

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    consumer = kafka.events_reader(settings, f"takeover-{time.time_ns()}")
    topic = settings.events_topic
    ends = kafka.end_offsets(consumer, topic, sorted(partitions))
    consumer.assign([TopicPartition(topic, p, ends[p]) for p in sorted(partitions)])
    deadline = time.monotonic() + timeout
    try:
        while firsts.keys() != partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.1):
                if msg.error():
                    continue
                event = decode_event_at(msg.value(), topic, msg.partition(), msg.offset())
                started = isinstance(event.body, m.JobStarted) and event.occurred_at >= since_us
                if started and event.tenant_id == "probe":
                    firsts.setdefault(msg.partition(), event.occurred_at)
    finally:
        stop.set()
        submitter.join()
        consumer.close()
    return firsts


def run_case(settings: Settings, case: str, events: int, extra: tuple[str, ...] = ()) -> None:
    print(f"case {case}:" + (f" (engines with {' '.join(extra)})" if extra else ""))
    a = Engine(settings, f"a-{case}", *extra)
    b: Engine | None = None
    try:
        took = wait(lambda: len(a.owned()) == PARTITIONS, 1800, "engine A to restore every partition")
        print(f"  A restored {events:,} events in {took:.1f} s from an empty state directory: "
              f"{events / took:,.0f} events/s (start-up included)")
        b = Engine(settings, f"b-{case}", *extra, *(("--standby",) if case == "standby" else ()))
        wait(lambda: len(a.owned()) + len(b.owned()) == PARTITIONS and b.owned() and not a.owned() & b.owned(),
             1800, "A and B to share the partitions")
        moved = a.owned()
        if case == "standby":
            took = wait(lambda: all(b.applied(settings).get(p) == a.applied(settings).get(p) for p in moved),
                        1800, "B's standby copies to catch up")
            print(f"  B's standby copies of A's partitions {sorted(moved)} caught up {took:.1f} s after B "
                  "owned its own")
        time.sleep(2)
        killed_us = time.time_ns() // 1000
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        with Client(settings) as client:
            firsts = probe_starts(settings, client, moved, killed_us, 900)
        for p in sorted(moved):
            took_s = (firsts[p] - killed_us) / 1e6 if p in firsts else float("nan")
            print(f"  partition {p}: jobs start again {took_s:.1f} s after the kill")
        worst = max((firsts[p] - killed_us) / 1e6 for p in firsts) if firsts else float("nan")
        text = b.log_path.read_text()
        restored = re.findall(r"partition (\d+): restoring from offset (\d+) to (\d+)", text)
        caught = {int(p): int(end) - int(start) for p, start, end in restored if int(p) in moved}
        for p, lag in re.findall(r"partition (\d+): (\d+) events to restore; a process of its own", text):
            if int(p) in moved:
                caught[int(p)] = caught.get(int(p), 0) + int(lag)
        print(f"  takeover ({case}): every partition of A running jobs again after {worst:.1f} s; "
              f"B read {sum(caught.values()):,} events to catch up")
    finally:
        for engine in (a, b):
            if engine is not None:
                engine.stop()


def held_namespace(bootstrap: str, namespace: str | None, jobs: int) -> tuple[Settings, int]:
    """The namespace named (written by an earlier run), or a fresh one with ``jobs`` jobs; and its offsets."""
    if namespace:
        settings = load_settings(bootstrap=bootstrap, namespace=namespace, state_dir=tempfile.mkdtemp())
        with kafka.KafkaLog(settings) as log:
            events = sum(log.end_offset(settings.events_topic, p) for p in range(PARTITIONS))
        print(f"namespace {namespace}: {events:,} offsets in {PARTITIONS} partitions")
        return settings, events
    settings = fresh_settings(bootstrap, partitions=PARTITIONS)
    started = time.perf_counter()
    events = write_log(settings, jobs)
    print(f"namespace {settings.namespace}: wrote {events:,} events of {jobs:,} jobs to {PARTITIONS} "
          f"partitions in {time.perf_counter() - started:.0f} s")
    return settings, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--cases", default="plain,standby", help="comma-separated: plain, standby")
    parser.add_argument("--namespace", help="reuse this namespace (written by an earlier run); skips writing the log")
    parser.add_argument("--engine-args", action="append", default=[],
                        help="flags for both engines, e.g. '--restore-process-min 0'; repeat it to run every case "
                             "once per value, alternating")
    args = parser.parse_args()
    with local_broker() as bootstrap:
        settings, events = held_namespace(bootstrap, args.namespace, args.jobs)
        for case in args.cases.split(","):
            for flags in args.engine_args or [""]:
                run_case(settings, case.strip(), events, tuple(flags.split()))


if __name__ == "__main__":
    main()
