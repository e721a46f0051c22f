"""What a rolling deploy does to long jobs: one job of ``--seconds`` (60) per partition through a rolling restart.

Two engines, ``a`` and ``b``, share a fresh namespace of ``--partitions`` (6) partitions, each with a state
directory of its own that survives its restart. Once both are active, one long job is submitted to each partition
and the bench waits until every one runs; then the rolling restart: SIGTERM ``a`` (wait until it exits), start
``a`` again (wait until it holds partitions again, which moves some of ``b``'s: a rebalance), SIGTERM ``b``, start
``b`` again. Then it waits until every job completed and reads each job's history from the log:

- ``starts``: attempts started (``restarts`` = starts - 1: each one began the work again from zero);
- the reasons of its ``JobRequeued`` events (``handover``, ``owner_stopped``, ``owner_lost``, ``producer_reset``);
- ``counted``: the attempts that count toward ``max_attempts`` (``epochq status``); before re-queues stopped
  counting, every start counted, so the same run would have shown ``starts`` there;
- ``total``: submit to completion, and ``lost``: seconds of work the abandoned attempts had done.

It runs once per ``--grace`` value (comma-separated: ``10`` is the default of ``epochq engine run``, a grace
longer than the job lets every job finish where it runs) and prints how long each SIGTERM took to exit: the
price of a long grace is a slower deploy.

``--remote engines`` runs the jobs on two remote workers (``epochq worker run``, pool ``default``; the engines
``--no-execute``) through the same rolling restart of the engines: the next owner of a partition adopts the
attempt its worker runs, so nothing starts again. ``--remote workers`` restarts the workers instead (SIGTERM
``w1`` with ``--worker-grace`` (2 s), start it again, then ``w2``) while the engines run on: the attempts a stopped
worker gave up lapse (lease 10 s) and are retried (``lease_expired``, counted: ``max_attempts`` 5 there). Both
print how many partitions changed owner during the restart (``moved``; 0 for a restart of the workers).

Usage: python bench/rolling_restart.py [--seconds 60] [--grace 10,75] [--partitions 6] [--remote engines|workers]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, active_partitions, fresh_settings, local_broker
from engine import App
from engine.client import Client
from engine.config import Settings
from engine.contract.ids import job_id_for_key
from engine.contract.partitioner import partition_for
from engine.questions.history import job_events

app = App()


@app.task("long", timeout=900, lease=10)  # the lease counts only where a remote worker runs it (--remote)
def long_job(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Works for ``seconds`` in steps of 50 ms, stopping at the next step once asked to (a hand-back asks)."""
    until = time.monotonic() + float(payload["seconds"])
    while time.monotonic() < until:
        ctx.raise_if_cancelled()
        time.sleep(0.05)
    return {"attempt": ctx.attempt}


class Engine:
    """One of the two engines: a process at a time, restarted on the same state directory."""

    def __init__(self, settings: Settings, name: str, grace: float, extra: tuple[str, ...] = ()):
        self.settings, self.name, self.grace, self.extra = settings, name, grace, extra
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.logs: list[Path] = []

    def command(self) -> list[str]:
        return [sys.executable, "-m", "engine.cli.main", "engine", "run", "bench.rolling_restart:app", "--bootstrap",
                self.settings.require_bootstrap(), "--namespace", self.settings.namespace, "--state-dir",
                str(Path(self.settings.state_dir) / self.name), "--owner-id", self.name, "--grace", str(self.grace),
                *self.extra]

    def start(self) -> None:
        self.runs += 1
        self.log = Path(self.settings.state_dir) / f"{self.name}-{self.runs}.log"
        self.logs.append(self.log)
        cmd = self.command()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONPATH": str(ROOT)})

    def stop(self) -> float:
        """SIGTERM; the seconds until the process exited."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(self.grace + 120)
        return time.monotonic() - t0

    def owned(self) -> int:
        return active_partitions([self.log]) if self.log is not None else 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Worker(Engine):
    """One of the two remote workers (pool ``default``), restarted under the same id."""

    def command(self) -> list[str]:
        return [sys.executable, "-m", "engine.cli.main", "worker", "run", "bench.rolling_restart:app", "--bootstrap",
                self.settings.require_bootstrap(), "--namespace", self.settings.namespace, "--pool", "default",
                "--concurrency", "6", "--worker-id", self.name, "--grace", str(self.grace)]


def claims(engines: list[Engine]) -> int:
    """Partitions the engines took (claimed or resumed) so far, over all their runs."""
    return sum(log.read_text().count(": active at epoch") for e in engines for log in e.logs if log.exists())


@dataclass
class JobFigures:
    partition: int
    starts: list[tuple[str, int]] = field(default_factory=list)  # (owner, µs) of each JobStarted
    reasons: list[str] = field(default_factory=list)
    counted: int = 0
    total_s: float = 0.0
    lost_s: float = 0.0


def wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


def settled(engines: list[Engine], partitions: int, newcomer: Engine | None = None) -> bool:
    """Every partition active somewhere, ``newcomer`` holding some, and still so a second later."""
    def now() -> bool:
        return active_partitions([e.log for e in engines if e.log]) == partitions and \
            (newcomer is None or newcomer.owned() > 0)
    if not now():
        return False
    time.sleep(1.0)
    return now()


def one_key_per_partition(partitions: int, tenant: str) -> dict[int, str]:
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < partitions:
        keys.setdefault(partition_for(job_id_for_key(tenant, f"long-{n}"), partitions), f"long-{n}")
        n += 1
    return keys


def figures(settings: Settings, client: Client, partition: int, job_id: str, submitted_us: int) -> JobFigures:
    events = [e.event for e in job_events(settings, job_id) if not e.fenced]
    out = JobFigures(partition)
    out.starts = [(e.owner, e.occurred_at) for e in events if e.type == "JobStarted"]
    out.reasons = [e.body.reason or "?" for e in events if e.type == "JobRequeued"]  # type: ignore[union-attr]
    out.reasons += [e.body.error_type for e in events if e.type == "JobFailed"]  # type: ignore[union-attr]
    ends = [e.occurred_at for e in events if e.type in ("JobRequeued", "JobFailed", "JobSucceeded")]
    done = next(e.occurred_at for e in events if e.type == "JobSucceeded")
    out.total_s = (done - submitted_us) / 1e6
    out.lost_s = sum(end - start for (_, start), end in zip(out.starts[:-1], ends[:-1])) / 1e6
    out.counted = client.status(job_id).attempts
    return out


def run(bootstrap: str, seconds: float, grace: float, partitions: int, remote: str | None = None,
        worker_grace: float = 2.0) -> None:
    settings = fresh_settings(bootstrap, partitions)
    extra = ("--no-execute",) if remote else ()
    a, b = Engine(settings, "a", grace, extra), Engine(settings, "b", grace, extra)
    workers = [Worker(settings, f"w{n}", worker_grace) for n in (1, 2)] if remote else []
    max_attempts = 5 if remote == "workers" else 1  # a worker's restart fails its attempts (lease_expired): counted
    try:
        a.start()
        wait(lambda: settled([a], partitions), 120, "a active")
        b.start()
        wait(lambda: settled([a, b], partitions, b), 120 + grace, "a and b sharing the partitions")
        for worker in workers:
            worker.start()
        with Client(settings) as client:
            submitted_us = time.time_ns() // 1000
            handles = {p: client.submit("long", {"seconds": seconds}, tenant="acme", idempotency_key=key,
                                        max_attempts=max_attempts)
                       for p, key in one_key_per_partition(partitions, "acme").items()}
            wait(lambda: all(client.status(h.job_id).status == "running" for h in handles.values()), 60,
                 "every job running")
            t0, claimed = time.monotonic(), claims([a, b])
            restarted = [a, b] if remote != "workers" else workers
            stops = []
            for one in restarted:
                stops.append(one.stop())
                one.start()
                if remote == "workers":
                    time.sleep(1.0)  # its first heartbeat, before the other one stops
                else:
                    wait(partial(settled, [a, b], partitions, one), 120 + grace, f"{one.name} back")
            deploy_s, moved = time.monotonic() - t0, claims([a, b]) - claimed
            outcomes = {p: h.wait(seconds * 4 + 120) for p, h in handles.items()}
            assert all(o.status == "completed" for o in outcomes.values()), outcomes
            jobs = [figures(settings, client, p, handles[p].job_id, submitted_us) for p in sorted(handles)]
    finally:
        for one in [a, b, *workers]:
            one.kill()
    what = {None: "", "engines": " (remote workers)", "workers": " of the workers"}[remote]
    report(seconds, grace, deploy_s, stops[0], stops[1], jobs, max_attempts, what, moved)


def report(seconds: float, grace: float, deploy_s: float, stop_a: float, stop_b: float,
           jobs: list[JobFigures], max_attempts: int = 1, what: str = "", moved: int = 0) -> None:
    print(f"\n--grace {grace:g}: jobs of {seconds:g} s, max_attempts {max_attempts}; the rolling restart{what} took "
          f"{deploy_s:.1f} s (SIGTERM of the first exited after {stop_a:.1f} s, of the second after {stop_b:.1f} s); "
          f"partitions moved: {moved}")
    print(f"{'partition':>9} {'starts':>6} {'owners':14} {'re-queued or failed as':28} {'counted':>7} {'before':>6} "
          f"{'total s':>7} {'lost s':>6}")
    for job in jobs:
        owners = ",".join(owner for owner, _ in job.starts)
        print(f"{job.partition:>9} {len(job.starts):>6} {owners:14} {','.join(job.reasons) or '-':28} "
              f"{job.counted:>5}/{max_attempts} {len(job.starts):>4}/{max_attempts} {job.total_s:>7.1f} "
              f"{job.lost_s:>6.1f}")
    restarts = [len(j.starts) - 1 for j in jobs]
    totals = [j.total_s for j in jobs]
    print(f"restarts per job: {sum(restarts)} in all, mean {statistics.mean(restarts):.2f}, max {max(restarts)}; "
          f"counted attempts: max {max(j.counted for j in jobs)} (before: max {max(len(j.starts) for j in jobs)}); "
          f"submit to completion: median {statistics.median(totals):.1f} s, max {max(totals):.1f} s; "
          f"work lost: {sum(j.lost_s for j in jobs):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long each job works")
    parser.add_argument("--grace", default="10,75", help="the engines' --grace values to run with, comma-separated")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--remote", choices=("engines", "workers"), help="run the jobs on two remote workers and "
                        "restart the engines, or the workers")
    parser.add_argument("--worker-grace", type=float, default=2.0, help="the workers' --grace (--remote)")
    args = parser.parse_args()
    with local_broker() as bootstrap:
        for grace in [float(g) for g in args.grace.split(",")]:
            run(bootstrap, args.seconds, grace, args.partitions, args.remote, args.worker_grace)


if __name__ == "__main__":
    main()
