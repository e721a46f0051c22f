"""``make demo``: a local Kafka, the engine with the example handlers, a mixed workload, a history.

It starts the local broker (unless one is running), creates a fresh namespace, runs an
engine in this process, submits work for three tenants, shows progress, prints a summary
and one job's full history, verifies the projections against the log, and stops
everything it started. ``--console`` (``make demo CONSOLE=1``) then serves the web console on
what it ran until Ctrl-C; without it, the demo ends by saying how to see the run in the console.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import TopicPartition

from engine import broker
from engine.client import Client, Outcome
from engine.config import Settings, load_settings
from engine.contract.codec import decode_event_at
from engine.runtime import kafka
from engine.questions.history import LoggedEvent, with_fencing
from engine.runtime.loop import Engine
from engine.runtime.topics import ensure_topics
from examples import demo_output
from examples.handlers import app
from projections.rebuild import verify

PARTITIONS = 3


def workload() -> list[dict]:
    """Several tenants and priorities, retries, a dead letter, a delayed job, a bad payload."""
    jobs: list[dict] = []
    for i in range(45):
        tenant = ("acme", "globex", "initech")[i % 3]
        jobs.append(dict(task_type="email.send", tenant=tenant, priority=5,
                         payload={"to": f"user{i}@{tenant}.example", "subject": f"Invoice {i}"}))
    jobs += [dict(task_type="report.generate", tenant="globex", priority=2, payload={"rows": 10 * i}) for i in range(6)]
    jobs += [dict(task_type="payment.charge", tenant="acme", priority=7, payload={"amount": 10 + i},
                  idempotency_key=f"order-{i}") for i in range(3)]
    jobs.append(dict(task_type="otp.send", tenant="initech", priority="critical", payload={"phone": "+15550100"}))
    jobs.append(dict(task_type="webhook.deliver", tenant="initech", payload={"url": "https://hooks.example/x"}))
    jobs.append(dict(task_type="email.send", tenant="acme", payload={"to": "not-an-address", "subject": "oops"}))
    jobs.append(dict(task_type="email.send", tenant="globex", delay=4.0,
                     payload={"to": "later@globex.example", "subject": "Reminder"}))
    return jobs


class Watcher:
    """Follows the events topic and keeps every submitted job's outcome up to date."""

    def __init__(self, settings: Settings, job_ids: set[str], starts: dict[int, int]):
        self.outcomes = {jid: Outcome(jid) for jid in job_ids}
        self.consumer = kafka.events_reader(settings, "demo-watcher")
        self.topic = settings.events_topic
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])

    def poll(self, seconds: float) -> None:
        """Read whatever arrived within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(1000, 0.1):
                if msg.error() or msg.key() is None:
                    continue
                outcome = self.outcomes.get(msg.key().decode())
                if outcome is not None:
                    event = decode_event_at(msg.value(), self.topic, msg.partition(), msg.offset())
                    for logged in with_fencing([(msg.offset(), event)], outcome.job_id, mid_log=True):
                        outcome.apply(logged)

    def counts(self) -> Counter:
        """How many jobs are in each status."""
        return Counter(o.status for o in self.outcomes.values())

    def close(self) -> None:
        """Release the consumer."""
        self.consumer.close()


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    parser = argparse.ArgumentParser(prog="examples.demo")
    parser.add_argument("--console", action="store_true", help="serve the console on the run until Ctrl-C")
    parser.add_argument("--console-port", type=int, default=int(os.environ.get("CONSOLE_PORT", "8080")))
    args = parser.parse_args(argv)
    log = demo_output.install()
    started_broker = broker.bootstrap_from_state() is None
    print("1. starting a local Apache Kafka (KRaft) ..." if started_broker else "1. using the running local broker")
    info = broker.start(nodes=1) if started_broker else None
    state_dir = Path(tempfile.mkdtemp(prefix="epochq-demo-"))
    settings = load_settings(bootstrap=info.bootstrap if info else None, namespace=f"demo{int(time.time())}",
                             state_dir=str(state_dir))
    keep_state = False  # a broker the demo did not start outlives it, and so can the projections of its run
    try:
        status = run_engine(settings, log)  # every client is closed before the broker goes
        if args.console:
            serve_console(settings, args.console_port)
        else:
            keep_state = not started_broker
            say_how_to_see(settings, keep_state)
        return status
    finally:
        if started_broker:
            broker.stop()
            print("6. local broker stopped")
        if not keep_state:
            shutil.rmtree(state_dir, ignore_errors=True)


def run_engine(settings: Settings, log: demo_output.ProgressLog) -> int:
    """Topics, an engine on a thread, the workload; the engine stopped (and its clients closed) at the end."""
    print(f"   bootstrap {settings.require_bootstrap()}, namespace {settings.namespace}")
    ensure_topics(settings, partitions=PARTITIONS)
    print(f"2. topics {settings.commands_topic}, {settings.events_topic}, {settings.tenants_topic} ready")
    engine = Engine(app, settings, owner_id="demo-engine")
    thread = threading.Thread(target=engine.run, name="engine", daemon=True)
    thread.start()
    try:
        status = run_workload(settings, log)
    finally:
        _stop(engine, thread)
    return status or verify_all(settings)


def _stop(engine: Engine, thread: threading.Thread) -> None:
    engine.stop()
    thread.join(30)


def serve_console(settings: Settings, port: int) -> None:
    """The web console on this run's projections and log, until Ctrl-C."""
    from engine.cli.console import console_access
    from engine.console.server import bind, serve

    access = console_access(port, "127.0.0.1", None, False)
    sock = bind(access)
    print(f"\n   console: http://127.0.0.1:{port}/ on namespace {settings.namespace} (Ctrl-C stops it and the demo)",
          flush=True)
    try:
        serve(settings, access, sock)
    except KeyboardInterrupt:
        pass


def say_how_to_see(settings: Settings, kept: bool) -> None:
    """How to open the console on what the demo ran."""
    if kept:
        print(f"\n   see this run in the console: epochq console --namespace {settings.namespace} "
              f"--state-dir {settings.state_dir}  (then http://127.0.0.1:8080/)")
    else:
        print("\n   to see a run in the web console: make demo CONSOLE=1 (serves it on http://127.0.0.1:8080/ "
              "until Ctrl-C)")


def run_workload(settings: Settings, log: demo_output.ProgressLog) -> int:
    """Submit the workload, follow it, print the summary, one history and the verification."""
    with Client(settings) as client:
        t0 = time.monotonic()
        handles = client.submit_many(workload())
        print(f"3. submitted {len(handles)} jobs for 3 tenants in {time.monotonic() - t0:.2f}s (acks=all)")
        starts = {h.partition: h.start_offset for h in sorted(handles, key=lambda h: -h.start_offset)}
        watcher = Watcher(settings, {h.job_id for h in handles}, starts)
        try:
            follow(watcher, len(handles), log, timeout=60)
            summary(watcher, handles)
        finally:
            watcher.close()
    charge = next(h for h in handles if h.job_id == _first(watcher, "payment.charge"))
    print(f"\n5. history of one payment job ({charge.job_id}):")
    show_history(watcher.outcomes[charge.job_id].events)
    return 0


def verify_all(settings: Settings) -> int:
    """Rebuild every partition from the log and compare it with the engine's stores (the engine stopped)."""
    print("\n   verifying projections against the log (rebuild from offset 0 and compare):")
    with kafka.KafkaLog(settings) as log:
        ok = all(report(verify(log, settings, p)) for p in range(PARTITIONS))
    return 0 if ok else 1


def follow(watcher: Watcher, total: int, log: demo_output.ProgressLog, timeout: float) -> None:
    """Show a progress line until every job is final or the timeout ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        watcher.poll(0.5)
        counts = watcher.counts()
        final = sum(counts[s] for s in ("completed", "dead", "cancelled", "rejected"))
        line = "  ".join(f"{s}={n}" for s, n in sorted(counts.items()))
        log.progress(f"4. progress: {final}/{total} final  [{line}]", final)
        if final == total:
            break
    log.done()


def summary(watcher: Watcher, handles: list) -> None:
    """Per-status and per-tenant totals, and the dead letters with their last error."""
    outcomes = watcher.outcomes.values()
    by_tenant: Counter = Counter()
    for o in outcomes:
        submitted = next((e.event for e in o.events if e.event.type == "JobSubmitted"), None)
        if submitted is not None:
            by_tenant[(submitted.tenant_id, o.status)] += 1
    print("\n   summary by status:", dict(watcher.counts()))
    for tenant in sorted({t for t, _ in by_tenant}):
        print(f"   {tenant:8} " + ", ".join(f"{s}={n}" for (t, s), n in sorted(by_tenant.items()) if t == tenant))
    retried = sum(1 for o in outcomes if o.attempts > 1)
    print(f"   jobs that needed retries: {retried}")
    for o in outcomes:
        if o.status == "dead":
            print(f"   dead: {o.job_id} reason={o.reason} last error: {o.error}")


def show_history(events: list[LoggedEvent]) -> None:
    """The rows `epochq history` prints."""
    from engine.cli.jobs import event_json

    for logged in events:
        row = event_json(logged)
        extra = row["error"] or row["detail"].get("cause") or ""
        print(f"   {row['time']}  epoch {row['epoch']}  {row['type']:18} attempt={row['attempt'] or '-'}  {extra}")


def report(result) -> bool:  # type: ignore[no-untyped-def]
    """Print one partition's verification verdict."""
    print(f"   partition {result.partition}: {'identical' if result.matches else 'DIFFERENT'} "
          f"({result.keys_compared} keys, up to offset {result.applied_offset})")
    return result.matches


def _first(watcher: Watcher, task_type: str) -> str:
    for o in watcher.outcomes.values():
        if any(getattr(e.event.body, "task_type", None) == task_type for e in o.events):
            return o.job_id
    raise LookupError(task_type)


if __name__ == "__main__":
    sys.exit(main())
