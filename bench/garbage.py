"""Garbage on the commands topic: the record generator, and the benchmark of engine memory under it.

``records(rng, partitions)`` yields what a careless or hostile producer puts on ``<ns>.commands``
(the shapes of tests/unit/domain/test_fuzz_commands.py's strategies, drawn from a seeded ``random.Random``
so that 100,000 of them cost a second): random bytes, truncated and bit-flipped Avro, other
subjects' records and unknown fingerprints, well-formed commands with one absurd field (empty or
8,000-character job ids, control characters and right-to-left marks in tenant ids, negative or
absurdly late ``run_at``, …), commands put in the wrong partition, commands for jobs that do not
exist, unknown task types, null values and keys, and odd Kafka headers. None of them is a job that
should run; ``valid(rng, partitions)`` makes the ones that should.

Run as a script, it is the benchmark of issue 11: an engine with default settings, 100,000 of
these records, its RSS printed every 10,000 once its consumer has caught up (docs/benchmarks.md,
"Memory under garbage input")::

    python bench/garbage.py [--records 100000] [--every 10000] [--partitions 6]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import re
import socket
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import engine_process, fresh_settings, local_broker
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import MAGIC, encode_command, encode_event
from engine.contract.partitioner import partition_for

NOW_US = 1_800_000_000_000_000  # only the shape of the values matters; the engine judges run_at by its own clock
TASK = "noop"  # the handler the valid jobs (and any admitted garbage) run: registered by bench.apps and the tests
ABSURD_NAMES = ["", " ", " acme", "acme ", "a\x1fb", "\x00", "ac\x00me", "\u200facme", "\u202eacme\u202c", "\u200b",
                "line\nbreak", "\u2028", "x" * 256, "j" * 8000, "\ufeff", "\x7f"]
OVERSIZED_WEIGHT = 9 / 499  # of 9 other kinds of weight 1: 1 record in 500
ABSURD_TIMES = [-2**63, -1_000_000, -1, NOW_US * 3, 2**62, 2**63 - 1]


@dataclass(frozen=True, slots=True)
class Record:
    """One record to produce to ``<ns>.commands``: exactly what goes on the wire, and where."""

    value: bytes | None
    key: bytes | None
    partition: int
    headers: list[tuple[str, bytes]] | None = None
    kind: str = ""


def records(rng: random.Random, partitions: int) -> Iterator[Record]:
    """Malformed records, forever: each kind as likely as the others, but 1 in 500 is oversized."""
    names, weights = list(KINDS), [OVERSIZED_WEIGHT if name == "oversized" else 1.0 for name in KINDS]
    while True:
        name = rng.choices(names, weights)[0]
        record = KINDS[name](rng, partitions)
        if rng.random() < 0.1:
            record = replace(record, headers=_headers(rng))
        yield replace(record, kind=name)


def valid(rng: random.Random, partitions: int, tenant: str = "acme") -> Record:
    """A SubmitJob that must run and complete."""
    job_id = _uuid(rng)
    command = m.Command(_uuid(rng), job_id, tenant, NOW_US, m.SubmitJob(TASK, m.Payload(b"{}")))
    return Record(encode_command(command), job_id.encode(), partition_for(job_id, partitions), kind="valid")


# --- the kinds ----------------------------------------------------------------------------------


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _submit(rng: random.Random, **fields: object) -> m.SubmitJob:
    return m.SubmitJob(**{"task_type": TASK, "payload": m.Payload(b"{}"), **fields})  # type: ignore[arg-type]


def _command(rng: random.Random, body: m.CommandBody, job_id: str | None = None, tenant: str = "acme") -> m.Command:
    return m.Command(_uuid(rng), _uuid(rng) if job_id is None else job_id, tenant, NOW_US, body)


def _home(command: m.Command, partitions: int) -> Record:
    """The command, well formed, in its job's partition."""
    return Record(encode_command(command), command.job_id.encode(errors="replace"),
                  partition_for(command.job_id, partitions))


def random_bytes(rng: random.Random, partitions: int) -> Record:
    """Bytes that were never Avro (sometimes starting with the single-object magic)."""
    body = rng.randbytes(rng.randint(0, 200))
    return Record((MAGIC if rng.random() < 0.3 else b"") + body, rng.randbytes(8), rng.randrange(partitions))


def truncated(rng: random.Random, partitions: int) -> Record:
    """A well-formed command cut short."""
    record = _home(_absurd_submit(rng), partitions)
    assert record.value is not None
    return replace(record, value=record.value[: rng.randrange(len(record.value))])


def flipped(rng: random.Random, partitions: int) -> Record:
    """A well-formed command with a few bytes changed, cut out or inserted."""
    record = _home(_absurd_submit(rng), partitions)
    raw = bytearray(record.value or b"")
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(raw) + 1)
        if rng.random() < 0.5 and at < len(raw):
            raw[at] ^= rng.randint(1, 255)
        else:
            raw[at:at + rng.randint(0, 4)] = rng.randbytes(rng.randint(0, 4))
    return replace(record, value=bytes(raw))


def foreign(rng: random.Random, partitions: int) -> Record:
    """A record of another subject (an event, a tenant config) or of an unknown schema fingerprint."""
    if rng.random() < 0.5:
        event = m.Event(_uuid(rng), _uuid(rng), "acme", 1, "nobody", NOW_US, m.JobQueued("submitted"))
        return Record(encode_event(event), None, rng.randrange(partitions))
    header = MAGIC + rng.randbytes(8)
    body = (_home(_absurd_submit(rng), partitions).value or b"")[len(header):]
    return Record(header + body, None, rng.randrange(partitions))


def absurd_submit(rng: random.Random, partitions: int) -> Record:
    """A well-formed SubmitJob, in its partition, with one field set to an absurd value."""
    return _home(_absurd_submit(rng), partitions)


def _absurd_submit(rng: random.Random) -> m.Command:
    field = rng.choice(list(ABSURD_FIELDS))
    command = _command(rng, _submit(rng))
    return ABSURD_FIELDS[field](rng, command)


ABSURD_FIELDS: dict[str, Callable[[random.Random, m.Command], m.Command]] = {
    "job_id": lambda rng, c: replace(c, job_id=rng.choice(ABSURD_NAMES)),
    "tenant_id": lambda rng, c: replace(c, tenant_id=rng.choice(ABSURD_NAMES)),
    "command_id": lambda rng, c: replace(c, command_id=rng.choice(ABSURD_NAMES) + _uuid(rng)),
    "run_at": lambda rng, c: replace(c, body=replace(c.body, run_at=rng.choice(ABSURD_TIMES))),
    "task_type": lambda rng, c: replace(c, body=replace(c.body, task_type=rng.choice(ABSURD_NAMES + ["no.such"]))),
    "priority": lambda rng, c: replace(c, body=replace(c.body, priority=rng.choice([-1, 10, 2**31 - 1, -2**31]))),
    "lane": lambda rng, c: replace(c, body=replace(c.body, lane=rng.choice(["DEAD", "dead", "fast", *ABSURD_NAMES]))),
    "max_attempts": lambda rng, c: replace(c, body=replace(c.body, max_attempts=rng.choice([0, -5, 1001, 2**31 - 1]))),
    "labels": lambda rng, c: replace(c, body=replace(c.body, labels={rng.choice(ABSURD_NAMES): "v"} if rng.random()
                                                     < 0.5 else {f"k{i}": "" for i in range(65)})),
    "scope": lambda rng, c: replace(c, body=replace(c.body, scope=rng.choice(["product:", "planet", *ABSURD_NAMES]))),
    "parent_job_id": lambda rng, c: replace(c, body=replace(c.body, parent_job_id=rng.choice(ABSURD_NAMES[:12]))),
    "idempotency_key": lambda rng, c: replace(c, body=replace(c.body, idempotency_key=rng.choice(["", "x" * 1001]))),
    "content_type": lambda rng, c: replace(c, body=replace(c.body, payload=m.Payload(b"{}", rng.choice(ABSURD_NAMES)))),
}


def wrong_partition(rng: random.Random, partitions: int) -> Record:
    """A valid SubmitJob produced to a partition its job id does not hash to."""
    record = _home(_command(rng, _submit(rng)), partitions)
    return replace(record, partition=(record.partition + rng.randrange(1, partitions)) % partitions)


def unknown_task(rng: random.Random, partitions: int) -> Record:
    """A valid SubmitJob for a task type no handler is registered for."""
    return _home(_command(rng, _submit(rng, task_type=f"no.such.task.{rng.randrange(10)}")), partitions)


def no_such_job(rng: random.Random, partitions: int) -> Record:
    """A command for a job that does not exist, or a schedule command whose envelope names another id."""
    body = rng.choice([m.CancelJob("why"), m.ReplayDeadJob(), m.RescheduleJob(rng.choice([0, *ABSURD_TIMES])),
                       m.ReportChild(_uuid(rng), _uuid(rng), "acme", "completed"),
                       m.PauseSchedule(rng.choice(ABSURD_NAMES)), m.RemoveSchedule("nightly"),
                       m.UpsertSchedule("s", "acme", TASK, "61 * * * *", m.Payload(b"{}"), "Mars/Olympus")])
    return _home(_command(rng, body), partitions)


def nulls(rng: random.Random, partitions: int) -> Record:
    """A record with no value (a tombstone on a delete topic), with or without a key."""
    return Record(None, rng.choice([None, b"", rng.randbytes(4)]), rng.randrange(partitions))


def oversized(rng: random.Random, partitions: int) -> Record:
    """A payload over the engine's limit (512 KiB by default), or as many bytes of junk (under the broker's 1 MB)."""
    size = rng.randint(520 * 1024, 900 * 1024)
    if rng.random() < 0.5:
        return Record(rng.randbytes(size), None, rng.randrange(partitions))
    return _home(_command(rng, _submit(rng, payload=m.Payload(rng.randbytes(size), "application/octet-stream"))),
                 partitions)


def _headers(rng: random.Random) -> list[tuple[str, bytes]]:
    names = ["", "\x00", "content-type", "x" * 300, "\u202e", "correlation_id"]
    return [(rng.choice(names), rng.randbytes(rng.randint(0, 64))) for _ in range(rng.randint(1, 5))]


KINDS: dict[str, Callable[[random.Random, int], Record]] = {
    "bytes": random_bytes, "truncated": truncated, "flipped": flipped, "foreign": foreign,
    "absurd": absurd_submit, "wrong_partition": wrong_partition, "unknown_task": unknown_task,
    "no_such_job": no_such_job, "null": nulls, "oversized": oversized,
}
"""Every kind of garbage, by name (the test counts its outcomes per kind)."""


# --- the benchmark: engine memory under garbage ---------------------------------------------------


def produce(producer: Producer, topic: str, batch: Iterable[Record]) -> list[tuple[int, int]]:
    """Produce every record of ``batch`` (acks=all): where each landed, (partition, offset), in order."""
    placed: list[tuple[int, int]] = []
    failed: list[KafkaError] = []

    def landed(at: int) -> Callable[[KafkaError | None, Message], None]:
        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failed.append(err)
            else:
                placed[at] = (msg.partition() or 0, msg.offset() or 0)
        return delivered

    for record in batch:
        placed.append((-1, -1))
        while True:
            try:
                producer.produce(topic, record.value, record.key, partition=record.partition,
                                 headers=record.headers, on_delivery=landed(len(placed) - 1))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60) or failed:
        raise RuntimeError(f"garbage not delivered: {failed[:3]}")
    return placed


def caught_up(settings: Settings, placed: Iterable[tuple[int, int]], timeout: float = 300.0) -> float:
    """Wait until the engine's group has committed past every record ``placed``; the seconds waited.

    Not the end of the topic: the engine's own transactions (a rejected child's report to its
    parent) leave commit markers there that no consumer ever commits past.
    """
    topic, started = settings.commands_topic, time.monotonic()
    last: dict[int, int] = {}
    for p, offset in placed:
        last[p] = max(last.get(p, -1), offset)
    group = Consumer({"bootstrap.servers": settings.require_bootstrap(), "group.id": f"{settings.namespace}.engine",
                      "enable.auto.commit": False})
    try:
        while time.monotonic() - started < timeout:
            committed = {tp.partition: tp.offset for tp in group.committed(
                [TopicPartition(topic, p) for p in last], timeout=10)}
            if all(committed[p] > offset for p, offset in last.items()):
                return time.monotonic() - started
            time.sleep(0.2)
    finally:
        group.close()
    raise TimeoutError(f"the engine did not catch up on {topic} in {timeout:.0f} s")


def rss_mb(pid: int) -> float:
    """Resident set size of a process, from /proc/<pid>/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024  # type: ignore[union-attr]


def rocksdb_mb(port: int) -> dict[str, float]:
    """The engine's ``epochq_rocksdb_memory_bytes`` by kind, in MB (sampled by the engine every 5 s)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = re.findall(r'^epochq_rocksdb_memory_bytes\{kind="(\w+)"\} (\S+)$', text, re.M)
    return {kind: float(value) / 2**20 for kind, value in found}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--every", type=int, default=10_000, help="records between RSS figures")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--settle", type=float, default=6.0,
                    help="seconds after catching up before RSS is read (the engine samples its gauges every 5 s)")
    ap.add_argument("--malloc-tuning", choices=("on", "off"), default="on",
                    help="EPOCHQ_MALLOC_TUNING for the engine (docs/operations.md): off to compare")
    ap.add_argument("--engine-args", action="append", default=[], help="extra `engine run` flags (repeatable)")
    args = ap.parse_args()
    os.environ["EPOCHQ_MALLOC_TUNING"] = args.malloc_tuning
    garbage, port = records(random.Random(args.seed), args.partitions), free_port()
    with local_broker() as bootstrap:
        settings = fresh_settings(bootstrap, args.partitions)
        with engine_process(settings, "bench.apps:app", "--metrics-port", str(port), *args.engine_args) as engine:
            run(settings, engine.pid, port, garbage, args)


def run(settings: Settings, pid: int, port: int, garbage: Iterator[Record], args: argparse.Namespace) -> None:
    """Send the garbage in steps; after each, once the engine caught up, print its RSS and RocksDB's share."""
    producer = Producer({"bootstrap.servers": settings.require_bootstrap(), "acks": "all", "linger.ms": 20})
    time.sleep(args.settle)
    start, rocks = rss_mb(pid), rocksdb_mb(port)
    print(f"engine pid {pid}, {args.partitions} partitions, malloc tuning {args.malloc_tuning}", flush=True)
    print(f"{'records':>9}  {'RSS MB':>7}  {'+ start':>7}  {'+ step':>6}  {'RocksDB':>7}  {'memtables':>9}  "
          f"{'tables':>6}  {'RSS - RocksDB':>13}  caught up in", flush=True)
    line(0, start, start, start, rocks, 0.0)
    sent, last = 0, start
    while sent < args.records:
        placed = produce(producer, settings.commands_topic,
                         itertools.islice(garbage, min(args.every, args.records - sent)))
        sent += len(placed)
        waited = caught_up(settings, placed)
        time.sleep(args.settle)
        now, rocks = rss_mb(pid), rocksdb_mb(port)
        line(sent, now, start, last, rocks, waited)
        last = now
    print(f"end: RSS {start:.1f} MB -> {last:.1f} MB after {sent:,} malformed records "
          f"(RocksDB {rocks.get('block_cache', 0):.1f} MB of it)", flush=True)


def line(sent: int, now: float, start: float, last: float, rocks: dict[str, float], waited: float) -> None:
    cache, tables = rocks.get("block_cache", 0.0), rocks.get("table_readers", 0.0)
    print(f"{sent:>9,}  {now:>7.1f}  {now - start:>+7.1f}  {now - last:>+6.1f}  {cache:>7.1f}  "
          f"{rocks.get('memtables', 0.0):>9.1f}  {tables:>6.1f}  {now - cache - tables:>13.1f}  {waited:.1f} s",
          flush=True)


if __name__ == "__main__":
    main()
