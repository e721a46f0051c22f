"""``make demo``: a local Kafka, the engine with the example handlers, a mixed workload, a history.

It starts the local broker (unless one is running), creates a fresh namespace, runs an
engine (``epochq engine run examples.handlers:app``, as a process of its own), submits work for
three tenants with ``engine.client.Client``, shows progress, prints a summary and one job's full
history (``epochq history``), verifies the projections against the log (``epochq projections
rebuild --all --verify``), and stops everything it started. ``--console`` (``make demo CONSOLE=1``)
then serves the web console (``epochq console``) on what it ran until Ctrl-C; without it, the demo
ends by saying how to see the run in the console.

It uses only what a user has: the client, the local broker's API (``engine.broker``) and the
``epochq`` command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from engine import broker
from engine.client import Client, JobHandle, Outcome
from examples import demo_output

PARTITIONS = 3
EPOCHQ = [sys.executable, "-m", "engine.cli.main"]
"""The ``epochq`` command of the Python running the demo (the console script is this, installed)."""
ENGINE_STOP_S = 30.0
FINAL = ("completed", "dead", "cancelled", "rejected")


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


class Run:
    """One demo run: its namespace and state directory, handed to every ``epochq`` it starts."""

    def __init__(self, bootstrap: str, state_dir: Path):
        self.bootstrap, self.state_dir = bootstrap, state_dir
        self.namespace = f"demo{int(time.time())}"
        self.env = {**os.environ, "EPOCHQ_BOOTSTRAP": bootstrap, "EPOCHQ_NAMESPACE": self.namespace,
                    "EPOCHQ_STATE_DIR": str(state_dir)}

    def epochq(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one ``epochq`` command on this run; its output captured."""
        return subprocess.run([*EPOCHQ, *args], env=self.env, capture_output=True, text=True, check=False)

    def start(self, *args: str, stderr: int | None = None) -> subprocess.Popen[str]:
        """Start a long-running ``epochq`` command on this run."""
        return subprocess.Popen([*EPOCHQ, *args], env=self.env, stderr=stderr, text=True)

    def client(self) -> Client:
        """A client of this run."""
        return Client(bootstrap=self.bootstrap, namespace=self.namespace, state_dir=str(self.state_dir))


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    parser = argparse.ArgumentParser(prog="examples.demo")
    parser.add_argument("--console", action="store_true", help="serve the console on the run until Ctrl-C")
    parser.add_argument("--console-port", type=int, default=int(os.environ.get("CONSOLE_PORT", "8080")))
    args = parser.parse_args(argv)
    log = demo_output.install()
    running = broker.bootstrap_from_state()
    print("1. starting a local Apache Kafka (KRaft) ..." if running is None else "1. using the running local broker")
    bootstrap = running or broker.start(nodes=1).bootstrap
    run = Run(bootstrap, Path(tempfile.mkdtemp(prefix="epochq-demo-")))
    keep_state = False  # a broker the demo did not start outlives it, and so can the projections of its run
    try:
        status = run_engine(run, log)  # every client is closed and the engine stopped before the broker goes
        if args.console:
            serve_console(run, args.console_port)
        else:
            keep_state = running is not None
            say_how_to_see(run, keep_state)
        return status
    finally:
        if running is None:
            broker.stop()
            print("6. local broker stopped")
        if not keep_state:
            shutil.rmtree(run.state_dir, ignore_errors=True)


def run_engine(run: Run, log: demo_output.ProgressLog) -> int:
    """Topics, an engine process, the workload; the engine stopped (SIGTERM) before the projections are verified."""
    print(f"   bootstrap {run.bootstrap}, namespace {run.namespace}")
    ensured = run.epochq("topics", "ensure", "--partitions", str(PARTITIONS))
    if ensured.returncode != 0:
        print(ensured.stderr, end="", file=sys.stderr)
        return ensured.returncode
    print(f"2. topics {run.namespace}.commands, {run.namespace}.events, {run.namespace}.tenants ready")
    engine = run.start("engine", "run", "examples.handlers:app", "--owner-id", "demo-engine", "--no-view",
                       "--log-level", "WARNING", stderr=subprocess.PIPE)
    relay = threading.Thread(target=_relay, args=(engine.stderr, log), name="engine-log", daemon=True)
    relay.start()
    try:
        status = run_workload(run, log)
    finally:
        _stop(engine)
        relay.join(5)
    return status or verify_all(run)


def _relay(lines: IO[str] | None, log: demo_output.ProgressLog) -> None:
    """The engine's log lines (failed attempts, dead letters) above the progress line."""
    for line in lines or ():
        log.above(line.rstrip("\n"))


def _stop(engine: subprocess.Popen[str]) -> None:
    engine.terminate()  # SIGTERM: stop taking work, finish, commit, leave the group
    try:
        engine.wait(ENGINE_STOP_S)
    except subprocess.TimeoutExpired:
        engine.kill()
        engine.wait()


def serve_console(run: Run, port: int) -> None:
    """The web console on this run's projections and log, until Ctrl-C."""
    print(f"\n   console: http://127.0.0.1:{port}/ on namespace {run.namespace} (Ctrl-C stops it and the demo)",
          flush=True)
    console = run.start("console", "--port", str(port))
    try:
        console.wait()
    except KeyboardInterrupt:
        console.terminate()
        console.wait()


def say_how_to_see(run: Run, kept: bool) -> None:
    """How to open the console on what the demo ran."""
    if kept:
        print(f"\n   see this run in the console: epochq console --namespace {run.namespace} "
              f"--state-dir {run.state_dir}  (then http://127.0.0.1:8080/)")
    else:
        print("\n   to see a run in the web console: make demo CONSOLE=1 (serves it on http://127.0.0.1:8080/ "
              "until Ctrl-C)")


def run_workload(run: Run, log: demo_output.ProgressLog) -> int:
    """Submit the workload, follow it, print the summary and one job's history."""
    with run.client() as client:
        t0 = time.monotonic()
        handles = client.submit_many(workload())
        print(f"3. submitted {len(handles)} jobs for 3 tenants in {time.monotonic() - t0:.2f}s (acks=all)")
        outcomes = follow(client, handles, log, timeout=60)
    summary(outcomes)
    charge = _first(outcomes, "payment.charge")
    print(f"\n5. history of one payment job ({charge}):")
    history = run.epochq("history", charge)
    print("".join(f"   {line}\n" for line in history.stdout.splitlines()), end="")
    return 0


def follow(client: Client, handles: list[JobHandle], log: demo_output.ProgressLog,
           timeout: float) -> dict[str, Outcome]:
    """Every job's outcome once final (or when ``timeout`` ran out), with a progress line as they move."""
    outcomes = {h.job_id: Outcome(h.job_id) for h in handles}

    def watch(outcome: Outcome) -> None:
        outcomes[outcome.job_id] = outcome
        show_progress(outcomes.values(), log)

    for outcome in client.as_completed(handles, timeout, watch=watch):
        outcomes[outcome.job_id] = outcome
        show_progress(outcomes.values(), log)
    log.done()
    return outcomes


def show_progress(outcomes: Iterable[Outcome], log: demo_output.ProgressLog) -> None:
    """The progress line: how many jobs are final, and how many are in each status."""
    counts = Counter(o.status for o in outcomes)
    final = sum(counts[s] for s in FINAL)
    line = "  ".join(f"{s}={n}" for s, n in sorted(counts.items()))
    log.progress(f"4. progress: {final}/{counts.total()} final  [{line}]", final)


def verify_all(run: Run) -> int:
    """Rebuild every partition from the log and compare it with the engine's stores (the engine stopped)."""
    print("\n   verifying projections against the log (rebuild from offset 0 and compare):")
    verified = run.epochq("projections", "rebuild", "--all", "--verify")
    shown = verified.stdout if verified.returncode == 0 else verified.stdout + verified.stderr  # stderr: its progress
    print("".join(f"   {line}\n" for line in shown.splitlines()), end="")
    return verified.returncode


def summary(outcomes: dict[str, Outcome]) -> None:
    """Per-status and per-tenant totals, and the dead letters with their last error."""
    by_tenant: Counter[tuple[str, str]] = Counter()
    for o in outcomes.values():
        submitted = next((e.event for e in o.events if e.event.type == "JobSubmitted"), None)
        if submitted is not None:
            by_tenant[(submitted.tenant_id, o.status)] += 1
    print("\n   summary by status:", dict(Counter(o.status for o in outcomes.values())))
    for tenant in sorted({t for t, _ in by_tenant}):
        print(f"   {tenant:8} " + ", ".join(f"{s}={n}" for (t, s), n in sorted(by_tenant.items()) if t == tenant))
    print(f"   jobs that needed retries: {sum(1 for o in outcomes.values() if o.attempts > 1)}")
    for o in outcomes.values():
        if o.status == "dead":
            print(f"   dead: {o.job_id} reason={o.reason} last error: {o.error}")


def _first(outcomes: dict[str, Outcome], task_type: str) -> str:
    return next(o.job_id for o in outcomes.values() if o.task_type == task_type)


if __name__ == "__main__":
    sys.exit(main())
