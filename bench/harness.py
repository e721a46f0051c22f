"""Shared benchmark plumbing: a broker, a fresh namespace, an engine process, an event follower."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import TopicPartition

from engine import broker
from engine.config import Settings, load_settings
from engine.contract.codec import decode_event_at
from engine.runtime import kafka
from engine.runtime.topics import ensure_topics

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def local_broker() -> Iterator[str]:
    """The broker named by EPOCHQ_BOOTSTRAP, else the running local broker, or one started (and stopped)."""
    running = os.environ.get("EPOCHQ_BOOTSTRAP") or broker.bootstrap_from_state()
    if running:
        yield running
        return
    info = broker.start(nodes=1)
    try:
        yield info.bootstrap
    finally:
        broker.stop()


def fresh_settings(bootstrap: str, partitions: int) -> Settings:
    """A new namespace with its topics, and a temporary state directory."""
    settings = load_settings(bootstrap=bootstrap, namespace=f"bench{time.time_ns() // 1000}",
                             state_dir=tempfile.mkdtemp(prefix="epochq-bench-"))
    ensure_topics(settings, partitions=partitions)
    return settings


@contextmanager
def engine_process(settings: Settings, app: str, *extra: str, instances: int = 1,
                   root: Path = ROOT) -> Iterator[subprocess.Popen]:
    """Engine instances in their own processes (the benchmark's client runs in this one); yields the first.

    ``root``: the source tree the engine runs from (another commit's, for an A/B comparison)."""
    procs, logs = [], []
    try:
        for n in range(instances):
            log_path = Path(settings.state_dir) / f"engine-{n}.log"
            logs.append(open(log_path, "w"))
            cmd = [sys.executable, "-m", "engine.cli.main", "engine", "run", app, "--bootstrap",
                   settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir",
                   str(Path(settings.state_dir) / f"engine-{n}"), "--owner-id", f"bench-{n}", *extra]
            env = {**os.environ, "PYTHONPATH": str(root)}
            procs.append(subprocess.Popen(cmd, cwd=root, stdout=logs[-1], stderr=subprocess.STDOUT, env=env))
        logs_paths = [Path(settings.state_dir) / f"engine-{n}.log" for n in range(instances)]
        wait_active(logs_paths, procs, partitions_of(settings))
        yield procs[0]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        for log in logs:
            log.close()


def wait_active(logs: list[Path], procs: list[subprocess.Popen], partitions: int, timeout: float = 90) -> None:
    """Until the engines' logs say every partition is active somewhere (and stays so for a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if active_partitions(logs) >= partitions:
            time.sleep(0.5)
            if active_partitions(logs) >= partitions:
                return
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise RuntimeError(log.read_text()[-2000:])
        time.sleep(0.2)
    raise TimeoutError("engines did not become active")


def active_partitions(logs: list[Path]) -> int:
    """Partitions whose newest ownership line, in any engine's log, says active."""
    active = 0
    for log in logs:
        state: dict[str, bool] = {}
        for line in log.read_text().splitlines():
            words = line.split()
            if "partition" in words and ("active" in words or "handed" in words or "dropped" in words):
                p = words[words.index("partition") + 1].rstrip(":")
                state[p] = "active" in words
        active += sum(state.values())
    return active


def follow_events(settings: Settings, partitions: int, until, timeout: float) -> None:  # type: ignore[no-untyped-def]
    """Feed every event from offset 0 to ``until(event)`` until it returns True."""
    consumer = kafka.events_reader(settings, "bench")
    topic = settings.events_topic
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.1):
                if not msg.error() and until(decode_event_at(msg.value(), topic, msg.partition(), msg.offset())):
                    return
        raise TimeoutError("benchmark did not finish in time")
    finally:
        consumer.close()


def partitions_of(settings: Settings) -> int:
    """The partition count of the namespace's events topic."""
    from engine.runtime.topics import partition_count

    return partition_count(settings)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered))) - 1))]


def median(values: list[float]) -> float:
    """The median."""
    return statistics.median(values)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process and its live children have used so far."""
    own, children = cpu_split(pid)
    return own + children


def cpu_split(pid: int) -> tuple[float, float]:
    """CPU time (user + system, all threads) so far of a process, and of its live children (e.g. an engine's view)."""
    own = children = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid:
            own += int(fields[11]) + int(fields[12])
        elif int(fields[1]) == pid:
            children += int(fields[11]) + int(fields[12])
    ticks = os.sysconf("SC_CLK_TCK")
    return own / ticks, children / ticks


def settled_cpu(pid: int, quiet_s: float = 2.0, timeout: float = 120) -> float:
    """The children's CPU seconds of ``pid`` once they stop using CPU (a view catching up), or at ``timeout``."""
    deadline = time.monotonic() + timeout
    last = cpu_split(pid)[1]
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = cpu_split(pid)[1]
        if now - last < 0.02 * quiet_s:
            return now
        last = now
    return last
