"""The time router under load: N future jobs held by one engine, then 1,000 jobs/s coming due for a minute.

Prints: submit rate; engine RSS at every million jobs accepted, at 10/50/100 % of them, and
after the due phase; RocksDB bytes on disk per job (after a flush and a full compaction); Kafka bytes
per job (the broker's log segments of the namespace); lateness p50/p99/p99.9 while holding
the N jobs (each submitted 10 s ahead, paced), split into the router's part (due -> JobQueued)
and the whole (due -> JobStarted);
restore time of one partition's projection from the log, in events/s. No assertions.

Usage: python bench/time_router.py [--jobs 1000000] [--partitions 6] [--due-rate 1000[,300...]] [--due-seconds 60]
                                   [--hold-minutes M] [--skip-restore] [--keep | --resume NAMESPACE STATE_DIR]
(--jobs 10000000 is the issue's size: one engine accepts about 1,500-1,900 jobs/s here, so that
takes 1.5-2 hours; --hold-minutes stops submitting after M minutes and goes on with what the
engine accepted by then; --keep keeps them, and --resume restarts an engine on them and runs only the
due phase. See docs/time.md for measured figures.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import TopicPartition
from rocksdict import Options, Rdict

from bench.harness import engine_process, fresh_settings, local_broker, partitions_of, percentile
from engine.broker.state import load_state
from engine.client import Client
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.runtime import kafka
from projections.rebuild import rebuild_into

SECOND = 1_000_000
DAY = 86_400 * SECOND
CHUNK = 20_000
MILLION = 1_000_000
MARKS = (10, 50, 100)  # per cent of the held jobs accepted when RSS is sampled (and every million)
AHEAD = 200_000  # with a time budget: jobs submitted but not yet accepted, at most
HELD_FILE = "held.json"  # phase 1's figures, kept beside the engine's state for --resume


def now_us() -> int:
    return time.time_ns() // 1000


def rss_mb(pid: int) -> float:
    """Resident set size of a process, from /proc/<pid>/status."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) / 1024  # type: ignore[union-attr]


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds a process has used, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_line(seconds: float, jobs: int) -> str:
    return (f"engine CPU in the due phases:            {seconds:10.1f} s, {seconds / max(1, jobs) * 1e6:.0f} µs "
            f"per due job (all threads)")


def scrape(port: int) -> dict[str, float]:
    """Metric name (with labels) -> value from the engine's endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("epochq_"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def metric_sum(values: dict[str, float], prefix: str) -> float:
    return sum(v for name, v in values.items() if name.startswith(prefix))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- phase 1: hold N future jobs -------------------------------------------------------------


class Progress:
    """What the submitter has sent and the engine has accepted (shared by the two threads)."""

    def __init__(self) -> None:
        self.submitted = 0
        self.accepted = 0
        self.stop = False
        self.busy_s = 0.0  # time spent inside submit_many


def submit_future(client: Client, jobs: int, start_us: int, span_us: int, progress: Progress,
                  paced: bool) -> None:
    """Submit ``jobs`` no-op jobs spread evenly over ``span_us`` from ``start_us``, in chunks.

    ``paced``: stay at most AHEAD jobs ahead of the engine, so that stopping (``progress.stop``)
    leaves no backlog of commands behind.
    """
    step = span_us / max(1, jobs)
    for first in range(0, jobs, CHUNK):
        while paced and not progress.stop and progress.submitted - progress.accepted > AHEAD:
            time.sleep(0.2)
        if progress.stop:
            return
        batch = [{"task_type": "noop", "payload": {}, "tenant": f"t{i % 10}", "run_at": (start_us + i * step) / SECOND}
                 for i in range(first, min(jobs, first + CHUNK))]
        t0 = time.monotonic()
        client.submit_many(batch)
        progress.busy_s += time.monotonic() - t0
        progress.submitted += len(batch)


def hold(client: Client, pid: int, port: int, jobs: int, budget_s: float) -> dict[str, float]:
    """Submit the future jobs; sample engine RSS at every million accepted and at 10, 50, 100 %.

    With a time budget (``budget_s`` > 0) submission stops when it runs out; the engine then
    accepts what was sent, and the benchmark goes on holding that many.
    """
    figures: dict[str, float] = {"rss_0": rss_mb(pid)}
    progress = Progress()
    # none comes due during the benchmark's own phases, nor before a --resume hours later
    start = now_us() + int(max(budget_s, jobs / 1000) + 4 * 3600) * SECOND
    submitter = threading.Thread(target=submit_future, args=(client, jobs, start, 30 * DAY, progress, budget_s > 0))
    t0 = time.monotonic()
    submitter.start()
    marks = sorted({jobs * p // 100 for p in MARKS} | set(range(MILLION, jobs + 1, MILLION)))
    while True:
        progress.accepted = int(metric_sum(scrape(port), "epochq_jobs_submitted_total"))
        while marks and progress.accepted >= marks[0]:
            figures[f"rss_at_{marks[0]}"] = rss = rss_mb(pid)
            print(f"  {marks[0]:>9,} accepted after {time.monotonic() - t0:7.1f} s: engine RSS {rss:.0f} MB",
                  flush=True)
            marks.pop(0)
        if budget_s and not progress.stop and time.monotonic() - t0 > budget_s:
            progress.stop = True
            print(f"  time budget of {budget_s:.0f} s spent: submission stops at {progress.submitted:,} jobs",
                  flush=True)
        if not submitter.is_alive() and progress.accepted >= progress.submitted:
            break
        time.sleep(0.5)
    figures["held"], figures["rss_held"] = progress.accepted, rss_mb(pid)
    figures["submit_s"], figures["accept_s"] = progress.busy_s, time.monotonic() - t0
    figures["hot"] = metric_sum(scrape(port), 'epochq_timers_hot{kind="job"')
    return figures


# --- phase 2: 1,000 jobs/s coming due ------------------------------------------------------


def end_offsets(settings: Settings, partitions: int) -> dict[int, int]:
    consumer = kafka.events_reader(settings, "bench-ends")
    try:
        return kafka.end_offsets(consumer, settings.events_topic, range(partitions))
    finally:
        consumer.close()


def come_due(client: Client, settings: Settings, partitions: int, rate: int, seconds: int,
             lead_s: float) -> dict[str, list[int]]:
    """``rate`` jobs per second coming due for ``seconds``, each submitted ``lead_s`` ahead; lateness (µs).

    Submissions are paced, one batch per second, so the engine accepts 1/``rate`` s apart what
    comes due 1/``rate`` s apart: the steady state of a busy system, not a burst to absorb.
    """
    starts = end_offsets(settings, partitions)
    first = now_us() + int(lead_s * SECOND)
    ids: set[str] = set()
    for second in range(seconds):
        due0 = first + second * SECOND
        pause = (due0 - int(lead_s * SECOND) - now_us()) / SECOND
        if pause > 0:
            time.sleep(pause)
        batch = [{"task_type": "noop", "payload": {}, "tenant": f"d{i % 10}",
                  "run_at": (due0 + i * SECOND // rate) / SECOND} for i in range(rate)]
        ids.update(h.job_id for h in client.submit_many(batch))
    print(f"  {len(ids)} due jobs submitted, {lead_s:.0f} s ahead of their due times", flush=True)
    return follow_starts(settings, starts, ids, timeout=lead_s + 180)


def follow_starts(settings: Settings, starts: dict[int, int], ids: set[str], timeout: float) -> dict[str, list[int]]:
    """Read the events from ``starts`` on until every job in ``ids`` has started."""
    consumer = kafka.events_reader(settings, "bench-due")
    topic = settings.events_topic
    consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    router, started, seen = [], [], set()
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < len(ids) and time.monotonic() < deadline:
            for msg in consumer.consume(5000, 0.2):
                if msg.error() or msg.key() is None or msg.key().decode() not in ids:
                    continue
                event = decode_event_at(msg.value(), topic, msg.partition(), msg.offset())
                body = event.body
                if isinstance(body, m.JobScheduled):
                    due_at[event.job_id] = body.due_at  # type: ignore[index]
                elif isinstance(body, m.JobQueued) and body.cause == "due" and event.job_id in due_at:
                    router.append(max(0, event.occurred_at - due_at[event.job_id]))
                elif isinstance(body, m.JobStarted) and event.job_id not in seen:
                    seen.add(event.job_id)  # type: ignore[arg-type]
                    started.append(event.occurred_at - body.due_at)
    finally:
        consumer.close()
    return {"router": router, "started": started, "missing": [len(ids) - len(seen)]}


due_at: dict[str, int] = {}


# --- phase 3: disk, log, restore ------------------------------------------------------------


def compacted_bytes(state_dir: Path, namespace: str) -> int:
    """Bytes of the stores after flushing memtables and compacting everything (engine stopped)."""
    root = Path(state_dir) / namespace
    for store in sorted(root.iterdir()):
        db = Rdict(str(store), Options(raw_mode=True))
        db.flush()
        db.compact_range(None, None)
        db.close()
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def kafka_bytes(namespace: str, bootstrap: str) -> dict[str, int] | None:
    """Bytes of the namespace's log segments on the local broker, per topic (None: not a local broker).

    The broker is found through its state file (``EPOCHQ_BROKER_HOME``, else the default home).
    """
    info = load_state()
    if info is None or info.bootstrap != bootstrap:
        return None
    sizes: dict[str, int] = {}
    for node in info.nodes:
        for d in node.data_dir.glob(f"{namespace}.*-*"):
            topic = d.name.rsplit("-", 1)[0].split(".", 1)[1]
            sizes[topic] = sizes.get(topic, 0) + sum(f.stat().st_size for f in d.glob("*.log"))
    return sizes


def restore_rate(settings: Settings, partition: int) -> tuple[int, float]:
    """(events, seconds) to rebuild one partition's projection from the log into a fresh store."""
    path = Path(tempfile.mkdtemp(prefix="epochq-restore-")) / "store"
    t0 = time.monotonic()
    with kafka.KafkaLog(settings) as log:
        store = rebuild_into(log, settings.events_topic, partition, path)
    elapsed = time.monotonic() - t0
    events = store.applied_offset() + 1
    store.close()
    shutil.rmtree(path.parent, ignore_errors=True)
    return events, elapsed


# --- the run -----------------------------------------------------------------------------


def ms(values: list[int], q: float) -> str:
    return f"{percentile(values, q) / 1000:8.1f}" if values else "     n/a"


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="future jobs to hold (spread over 30 days)")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--due-rate", default="1000",
                        help="jobs per second coming due in phase 2; several (e.g. 300,1000) run one after another")
    parser.add_argument("--due-seconds", type=int, default=60)
    parser.add_argument("--lead", type=float, default=10.0, help="seconds ahead of its due time each is submitted")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="the engine's NORMAL slots (default: the engine's own default, no flag passed)")
    parser.add_argument("--skip-restore", action="store_true", help="do not time a partition's restore")
    parser.add_argument("--hold-minutes", type=float, default=0.0,
                        help="stop submitting after this long and hold what the engine accepted (0: all --jobs)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the namespace and the engine's state for a later --resume")
    parser.add_argument("--resume", nargs=2, metavar=("NAMESPACE", "STATE_DIR"),
                        help="skip phase 1: restart the engine on a --keep run's state and measure lateness")
    args = parser.parse_args()
    rates = [int(r) for r in str(args.due_rate).split(",")]
    with local_broker() as bootstrap:
        if args.resume:
            settings = load_settings(bootstrap=bootstrap, namespace=args.resume[0], state_dir=args.resume[1])
            args.partitions = partitions_of(settings)
        else:
            settings = fresh_settings(bootstrap, args.partitions)
        port = free_port()
        print(f"namespace {settings.namespace}, {args.partitions} partitions, state in {settings.state_dir}")
        t0 = time.monotonic()
        slots = ("--concurrency", str(args.concurrency)) if args.concurrency else ()
        with engine_process(settings, "bench.apps:app", *slots, "--metrics-port", str(port)) as proc:
            client = Client(settings)
            if args.resume:
                held = json.loads((Path(settings.state_dir) / HELD_FILE).read_text())
                print(f"resumed: engine active on the kept state after {time.monotonic() - t0:.1f} s, "
                      f"holding {int(held['held']):,}: RSS {rss_mb(proc.pid):.0f} MB", flush=True)
            else:
                print(f"phase 1: {args.jobs} jobs due over the next 30 days", flush=True)
                held = hold(client, proc.pid, port, args.jobs, args.hold_minutes * 60)
                (Path(settings.state_dir) / HELD_FILE).write_text(json.dumps(held))
            lates = {}
            cpu_before = cpu_s(proc.pid)
            for rate in rates:
                print(f"phase 2: {rate} jobs/s coming due for {args.due_seconds} s", flush=True)
                lates[rate] = come_due(client, settings, args.partitions, rate, args.due_seconds, args.lead)
            rss_after = rss_mb(proc.pid)
            cpu_due = cpu_s(proc.pid) - cpu_before
            gc_pauses = gc_summary(scrape(port))
            client.close()
        if args.resume:
            report_lateness(lates, int(held["held"]))
            print(f"engine RSS after the due phase:          {rss_after:10.0f} MB")
            print(f"engine GC pauses over the run:           {gc_pauses}")
            print(cpu_line(cpu_due, sum(rates) * args.due_seconds))
            return
        total_jobs = int(held["held"]) + sum(rates) * args.due_seconds
        disk = compacted_bytes(Path(settings.state_dir) / "engine-0", settings.namespace)
        logs = kafka_bytes(settings.namespace, bootstrap)
        events, restore_s = (0, 0.0) if args.skip_restore else restore_rate(settings, 0)
    print()
    n = int(held["held"])
    held_of = "" if n == args.jobs else f" (of {args.jobs}: time budget)"
    print(f"future jobs held:                        {n:10d}{held_of}")
    print(f"submit rate (one process, submit_many):  {n / held['submit_s']:10.0f} jobs/s")
    print(f"engine acceptance (decided and folded):  {n / held['accept_s']:10.0f} jobs/s "
          f"({held['accept_s']:.0f} s for {n})")
    rss = "  ".join(f"{key[7:]}: {value:.0f}" for key, value in held.items() if key.startswith("rss_at_"))
    print(f"engine RSS (MB) at 0 held: {held['rss_0']:.0f}; {rss}; holding all: {held['rss_held']:.0f}; "
          f"after the due phase {rss_after:.0f}")
    print(f"job timers in memory while holding:      {held['hot']:10.0f}")
    print(f"RocksDB on disk (flushed, compacted):    {disk / total_jobs:10.0f} B/job ({disk / 1e6:.0f} MB, "
          f"{total_jobs} jobs)")
    if logs is None:
        print("Kafka log bytes per job:                 n/a (set EPOCHQ_BROKER_HOME to the broker's home)")
    else:
        print(f"Kafka log bytes per job:                 {logs.get('events', 0) / total_jobs:10.0f} B events + "
              f"{logs.get('commands', 0) / total_jobs:.0f} B commands")
    report_lateness(lates, n)
    print(f"engine GC pauses over the run:           {gc_pauses}")
    print(cpu_line(cpu_due, sum(rates) * args.due_seconds))
    if restore_s:
        print(f"restore of partition 0:                  {events / restore_s:10.0f} events/s ({events} events in "
              f"{restore_s:.1f} s)")
    if args.keep:
        print(f"kept: resume with --resume {settings.namespace} {settings.state_dir}")
    else:
        shutil.rmtree(settings.state_dir, ignore_errors=True)


def gc_summary(metrics: dict[str, float]) -> str:
    """Collections per generation, their total time and the bucket of the longest, from the engine's metrics."""
    parts = []
    for gen in ("0", "1", "2"):
        count = metrics.get(f'epochq_gc_pause_seconds_count{{generation="{gen}"}}', 0.0)
        total = metrics.get(f'epochq_gc_pause_seconds_sum{{generation="{gen}"}}', 0.0)
        buckets = sorted((float(name.split('le="')[1].split('"')[0]), value) for name, value in metrics.items()
                         if name.startswith("epochq_gc_pause_seconds_bucket") and f'generation="{gen}"' in name)
        longest = next((le for le, value in buckets if value >= count), float("inf")) if count else 0.0
        parts.append(f"gen {gen}: {count:.0f} ({total * 1000:.0f} ms, longest <= {longest * 1000:g} ms)")
    return "; ".join(parts)


def report_lateness(lates: dict[int, dict[str, list[int]]], held: int) -> None:
    """Print the lateness figures of each due rate."""
    for rate, late in lates.items():
        print(f"lateness at {rate:5d}/s, holding {held} (ms): p50 {ms(late['started'], 50)}  "
              f"p99 {ms(late['started'], 99)}  p99.9 {ms(late['started'], 99.9)}   (due -> JobStarted, "
              f"{len(late['started'])} jobs, {late['missing'][0]} not started)")
        print(f"  of which the time router (ms):         p50 {ms(late['router'], 50)}  p99 {ms(late['router'], 99)}"
              f"  p99.9 {ms(late['router'], 99.9)}   (due -> JobQueued)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
