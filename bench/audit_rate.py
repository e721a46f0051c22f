"""Reading a large log back: rebuild, a tenant's audit with and without its index, one job's status.

A fresh namespace (6 partitions) gets the synthetic log of ``bench/takeover.py`` (``--jobs``
jobs of 100 tenants, half held for 30 days and half finished: 3 events per job on average).
Then, as an operator would run them:

1. ``epochq projections rebuild --all`` into an empty state directory: events folded per second;
2. ``epochq audit --tenant tenant-3`` with that state directory (through the tenant index) and
   with an empty one (a scan of every partition), alternating, ``--runs`` times each: wall
   time and records read per second;
3. ``Client.status(job)`` of ``--probes`` random jobs with the state directory (history index)
   and of a few without (a scan of the job's partition): milliseconds per call.

Usage: python bench/audit_rate.py [--jobs 1000000] [--runs 3] [--probes 20] [--namespace NS [--state-dir DIR]]
(``--namespace`` reuses a namespace an earlier run wrote, and skips writing the log; ``--state-dir``
reuses the state directory its rebuild made, and skips the rebuild.)
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, fresh_settings, local_broker
from bench.takeover import PARTITIONS, write_log
from engine.client import Client
from engine.config import Settings, load_settings

TENANT = "tenant-3"


def epochq(settings: Settings, state_dir: Path, *args: str) -> tuple[float, float, str]:
    """Run one CLI command on the namespace; (wall seconds, CPU seconds of the command, stderr)."""
    cmd = [sys.executable, "-m", "engine.cli.main", *args, "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace, "--state-dir", str(state_dir)]
    started, cpu = time.perf_counter(), _children_cpu()
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took, cpu = time.perf_counter() - started, _children_cpu() - cpu
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {run.stderr.strip()}")
    return took, cpu, run.stderr


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rebuild(settings: Settings, state_dir: Path, events: int) -> None:
    took, cpu, _ = epochq(settings, state_dir, "projections", "rebuild", "--all")
    print(f"rebuild --all: {events:,} events in {took:.1f} s = {events / took:,.0f} events/s; "
          f"{cpu:.1f} s CPU = {cpu / events * 1e6:.1f} µs CPU per event, {events / cpu:,.0f} events per CPU second")


def audits(settings: Settings, state_dir: Path, runs: int) -> None:
    empty = Path(tempfile.mkdtemp(prefix="epochq-no-state-"))
    times: dict[str, list[float]] = {"index": [], "scan": []}
    for _ in range(runs):
        for case, where in (("index", state_dir), ("scan", empty)):
            took, cpu, err = epochq(settings, where, "audit", "--tenant", TENANT, "--no-progress", "--out", "/dev/null")
            times[case].append(took)
            summary = err.strip().splitlines()[-1]
            records = int(re.search(r"read (\d+) records", summary).group(1))  # type: ignore[union-attr]
            print(f"  audit {case:5}: {took:6.2f} s ({cpu:5.1f} s CPU), {records / took:10,.0f} records decoded/s"
                  f"  | {summary}")
    for case, values in times.items():
        print(f"audit --tenant {TENANT} via {case}: median {statistics.median(values):.2f} s over {runs} runs")


def statuses(settings: Settings, state_dir: Path, jobs: int, probes: int) -> None:
    rng = random.Random(7)
    picks = [f"job-{rng.randrange(jobs):09d}" for _ in range(probes)]
    for case, where, sample in (("index", state_dir, picks), ("scan", Path(tempfile.mkdtemp()), picks[:2])):
        client = Client(settings.model_copy(update={"state_dir": where}))
        took = []
        for job_id in sample:
            started = time.perf_counter()
            outcome = client.status(job_id)
            took.append((time.perf_counter() - started) * 1000)
            assert outcome.status in ("scheduled", "completed"), (job_id, outcome.status)
        client.close()
        print(f"Client.status via {case}: median {statistics.median(took):,.0f} ms, max {max(took):,.0f} ms "
              f"over {len(sample)} jobs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--namespace", help="reuse this namespace (written by an earlier run with the same --jobs)")
    parser.add_argument("--state-dir", type=Path, help="reuse this state directory (rebuilt by an earlier run)")
    args = parser.parse_args()
    with local_broker() as bootstrap:
        if args.namespace:
            settings = load_settings(bootstrap=bootstrap, namespace=args.namespace, state_dir=tempfile.mkdtemp())
            events = 0
        else:
            settings = fresh_settings(bootstrap, partitions=PARTITIONS)
            started = time.perf_counter()
            events = write_log(settings, args.jobs)
            print(f"namespace {settings.namespace}: wrote {events:,} events of {args.jobs:,} jobs "
                  f"in {time.perf_counter() - started:.0f} s")
        state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="epochq-audit-state-"))
        if not args.state_dir:
            rebuild(settings, state_dir, events or 3 * args.jobs + PARTITIONS)
        audits(settings, state_dir, args.runs)
        statuses(settings, state_dir, args.jobs, args.probes)


if __name__ == "__main__":
    main()
