"""The remote workers' transport (issue 33): a classic consumer group per pool against a Kafka share group (KIP-932),
measured on the broker itself, no engine: what each does for throughput, a slow record's head-of-line blocking,
and the records a consumer held when it was killed.

- ``throughput``: 20,000 records over 6 partitions, two consumers (threads), a no-op each: records/s, redeliveries.
- ``head-of-line``: one partition; the first record is slow (3 s), 100 fast ones follow; two consumers, one record
  at a time each: when the last fast record was done.
- ``kill``: a consumer process takes 50 records and is killed (SIGKILL) before it acknowledges or commits them, while
  the other consumer polls on (as a worker does): how long from the kill until the last of the records the killed
  one held reached the other (their jobs done elsewhere: the records are no-ops), and how many of them the other had
  *before* the kill (records that were never held). Classic: the group's session timeout, 6 s here; share: the record
  lock, ``group.share.record.lock.duration.ms``, 30 s by default, or sooner when the broker sees the connection close.
- ``stop``: the same with SIGSTOP: the holder hangs with its connection open.

Usage: python bench/share_groups.py [throughput] [head_of_line] [kill] [stop]   (all four by default; the Python
client's ShareConsumer is a preview: it says so on stderr)
The client here uses confluent_kafka directly: a bench, outside the engine's one Kafka edge.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import local_broker

SESSION_MS = 6000


def topic(bootstrap: str, partitions: int) -> str:
    name = f"bench.share.{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def consumer(kind: str, bootstrap: str, group: str, name: str, one_at_a_time: bool = False,
             commit: bool = True) -> object:
    if kind == "share":
        conf = {"bootstrap.servers": bootstrap, "group.id": group}
        if one_at_a_time:
            conf["max.poll.records"] = 1
        c: object = ShareConsumer(conf)
    else:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "partition.assignment.strategy": "cooperative-sticky",  # as the worker: a joiner takes nothing
                      "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1500,
                      "enable.auto.commit": commit, "auto.commit.interval.ms": 200,
                      **({"max.partition.fetch.bytes": 1024} if one_at_a_time else {})})
    c.subscribe([name])  # type: ignore[attr-defined]
    return c


def records(c: object, kind: str, timeout: float) -> list:
    if kind == "share":
        return [m for m in (c.poll(timeout) or []) if not m.error()]  # type: ignore[attr-defined]
    return [m for m in c.consume(num_messages=100, timeout=timeout) if not m.error()]  # type: ignore[attr-defined]


def joined(consumers: list[object], kind: str, seconds: float = 6.0) -> None:
    """Poll until the group has settled (a share group starts at the log's end: produce after this)."""
    end = time.time() + seconds
    while time.time() < end:
        for c in consumers:
            records(c, kind, 0.1)


def produce(bootstrap: str, name: str, values: list[bytes], partition: int = -1) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    t0 = time.time()
    for v in values:
        p.produce(name, v, partition=partition) if partition >= 0 else p.produce(name, v)
        p.poll(0)
    p.flush()
    return t0


def throughput(bootstrap: str, kind: str, n: int = 20_000) -> str:
    name = topic(bootstrap, 6)
    cs = [consumer(kind, bootstrap, f"{name}.g", name) for _ in range(2)]
    joined(cs, kind)
    seen: list[bytes] = []
    lock = threading.Lock()

    def run(c: object) -> None:
        end = time.time() + 60
        while len(seen) < n and time.time() < end:
            got = [m.value() for m in (c.poll(0.2) or []) if not m.error()] if kind == "share" else \
                [m.value() for m in c.consume(num_messages=500, timeout=0.2) if not m.error()]  # type: ignore[attr-defined]
            with lock:
                seen.extend(got)

    threads = [threading.Thread(target=run, args=(c,)) for c in cs]
    for t in threads:
        t.start()
    t0 = produce(bootstrap, name, [str(i).encode() for i in range(n)])
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    for c in cs:
        c.close()  # type: ignore[attr-defined]
    again = len(seen) - len(set(seen))
    return f"{len(set(seen))}/{n} records in {elapsed:.1f} s ({n / elapsed:,.0f}/s), {again} redelivered"


def head_of_line(bootstrap: str, kind: str, fast: int = 100) -> str:
    name = topic(bootstrap, 1)
    cs = [consumer(kind, bootstrap, f"{name}.g", name, one_at_a_time=True) for _ in range(2)]
    joined(cs, kind)
    done: dict[bytes, float] = {}
    stop = threading.Event()

    def run(c: object) -> None:
        while not stop.is_set():
            for m in records(c, kind, 0.1):
                if m.value() == b"slow":
                    time.sleep(3.0)
                done[m.value()] = time.time()

    threads = [threading.Thread(target=run, args=(c,)) for c in cs]
    for t in threads:
        t.start()
    t0 = produce(bootstrap, name, [b"slow", *(f"fast{i}".encode() for i in range(fast))], partition=0)
    end = time.time() + 30
    while sum(k.startswith(b"fast") for k in done) < fast and time.time() < end:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    for c in cs:
        c.close()  # type: ignore[attr-defined]
    last = max((at for k, at in done.items() if k.startswith(b"fast")), default=float("nan"))
    return f"the {fast} fast records done {last - t0:.1f} s after the slow one was produced"


HOLDER = """
import sys, time
sys.path.insert(0, {root!r})
from bench.share_groups import consumer, records
kind, bootstrap, name = sys.argv[1:4]
c = consumer(kind, bootstrap, name + ".g", name, commit=False)
held = []
while not held:  # take one batch, then never poll again: nothing acknowledged, nothing committed
    held = [m.value().decode() for m in records(c, kind, 0.2)]
print("held", *held, flush=True)
time.sleep(3600)
"""


class Survivor:
    """The other consumer, polling on a thread of its own once let go (as a worker does): when it first got each
    record, and how many it got more than once."""

    def __init__(self, c: object, kind: str) -> None:
        self.c, self.kind = c, kind
        self.first: dict[str, float] = {}
        self.again = 0
        self.polling = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            if not self.polling.wait(0.1):
                continue
            for m in records(self.c, self.kind, 0.1):
                value = m.value().decode()
                self.again += value in self.first
                self.first.setdefault(value, time.time())

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.c.close()  # type: ignore[attr-defined]


def kill(bootstrap: str, kind: str, n: int = 50, sig: int = signal.SIGKILL) -> str:
    """A consumer takes records and dies (or hangs: ``sig`` SIGSTOP) holding them: how long from the kill until the
    last record it held reached the other consumer, which polls all along from before the kill, as a worker does
    (it starts once the holder holds its records: a share group would otherwise hand it all of them first)."""
    name = topic(bootstrap, 1)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=str(Path(__file__).resolve().parents[1])),
                               kind, bootstrap, name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if kind == "classic":
        time.sleep(6.0)  # the holder must own the one partition first: the other joins later and gets nothing
    survivor = Survivor(consumer(kind, bootstrap, f"{name}.g", name), kind)
    survivor.polling.set()
    time.sleep(6.0)  # both in the group (a share group starts at the log's end: produce after this)
    survivor.polling.clear()
    time.sleep(0.3)
    produce(bootstrap, name, [f"r{i}".encode() for i in range(n)], partition=0)
    assert holder.stdout is not None
    ready, _, _ = select.select([holder.stdout], [], [], 30)
    held = holder.stdout.readline().split()[1:] if ready else []
    survivor.polling.set()
    time.sleep(1.0)
    before = {v for v in held if v in survivor.first}  # the other had them already: they were never held
    os.kill(holder.pid, sig)
    killed = time.time()
    end = killed + 60
    while time.time() < end and not all(v in survivor.first for v in held):
        time.sleep(0.05)
    survivor.close()
    if sig != signal.SIGKILL:
        os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    reached = [survivor.first[v] for v in held if v in survivor.first and v not in before]
    last = f"the last {max(reached) - killed:.1f} s after the kill" if reached else "none after the kill"
    return (f"the holder held {len(held)} of {n}; {len(reached)} reached the other consumer after the kill, {last}; "
            f"{len(before)} had reached it before the kill; {survivor.again} delivered twice; "
            f"{len(survivor.first)}/{n} in all")


def stop(bootstrap: str, kind: str) -> str:
    """As ``kill``, but the holder hangs (SIGSTOP): its connection stays open."""
    return kill(bootstrap, kind, sig=signal.SIGSTOP)


def main() -> None:
    chosen = sys.argv[1:] or ["throughput", "head_of_line", "kill", "stop"]
    with local_broker() as bootstrap:
        for scenario in (SCENARIOS[name] for name in chosen):
            for kind in ("classic", "share"):
                print(f"{scenario.__name__:12} {kind:7}: {scenario(bootstrap, kind)}", flush=True)


SCENARIOS = {"throughput": throughput, "head_of_line": head_of_line, "kill": kill, "stop": stop}

if __name__ == "__main__":
    main()
