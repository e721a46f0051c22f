"""An engine with an empty state directory after N finished no-op jobs: seconds until it runs a new job.

A fresh namespace (6 partitions) gets a log of ``--jobs`` finished jobs (the four events an
owner writes for each, straight to the events topic, as bench/takeover.py does). Engine A (this
checkout, default settings) restores it from offset 0 and, once active, checkpoints each
partition's write model (docs/architecture.md); then it stops (SIGTERM). Engine B starts with an
EMPTY state directory; from B's start a no-op probe job is submitted every 100 ms, and the figure
is the time from B's start until every partition has started a probe. With ``--base DIR`` (a
checkout of another commit, e.g. ``git archive main | tar -x -C DIR``) the same is measured for
an engine run from DIR, on the same namespace, alternating with this checkout's ``--runs`` times.
Also printed: the size of B's stores (the write model) in bytes per finished job.

Usage: python bench/cold_start.py [--jobs 200000] [--runs 1] [--base DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.harness import ROOT, fresh_settings, local_broker
from bench.takeover import PARTITIONS, probe_starts, write_log
from engine.client import Client
from engine.config import Settings, load_settings


def write_finished(settings: Settings, jobs: int) -> int:
    """A claim per partition, then ``jobs`` finished jobs (submitted, queued, started, succeeded)."""
    return write_log(settings, jobs, lambda n: 2 * n + 1)  # odd: a finished job


def start(settings: Settings, name: str, root: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    state = Path(tempfile.mkdtemp(prefix=f"epochq-cold-{name}-"))
    log_path = state / "engine.log"
    cmd = [sys.executable, "-m", "engine.cli.main", "engine", "run", "bench.apps:app", "--bootstrap",
           settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir", str(state / "s"),
           "--owner-id", name]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(cmd, cwd=root, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env)
    return proc, state, log_path


def wait_log(log_path: Path, pattern: str, count: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(re.findall(pattern, log_path.read_text())) >= count:
            return True
        time.sleep(0.2)
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def store_bytes(state: Path, namespace: str) -> int:
    root = state / "s" / namespace
    return sum(f.stat().st_size for d in root.glob("p[0-9][0-9][0-9][0-9]") for f in d.rglob("*") if f.is_file())


def cold_start(settings: Settings, label: str, root: Path, jobs: int) -> None:
    """One engine from ``root`` with an empty state directory: seconds until every partition started a probe."""
    t0_us = time.time_ns() // 1000
    proc, state, log_path = start(settings, f"cold-{re.sub(r'[^a-z]', '', label)}-{t0_us}", root)
    try:
        with Client(settings) as client:
            firsts = probe_starts(settings, client, set(range(PARTITIONS)), t0_us, 900)
        worst = max((firsts[p] - t0_us) / 1e6 for p in firsts) if firsts else float("nan")
        text = log_path.read_text()
        loaded = re.findall(r"partition (\d+): loaded the checkpoint .* restoring from offset (\d+)", text)
        restored = re.findall(r"partition (\d+): restoring from offset (\d+) to (\d+)", text)
        replayed = sum(int(end) - int(first) for _, first, end in restored)
        print(f"  {label}: every partition runs a new job {worst:.1f} s after the engine started "
              f"({len(loaded)} partitions loaded a checkpoint; {replayed:,} events replayed)")
        time.sleep(1)
    finally:
        stop(proc)
    if loaded:
        size = store_bytes(state, settings.namespace)
        print(f"  {label}: write-model stores {size / 1e6:.1f} MB on disk = {size / jobs:.0f} bytes per finished job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--base", type=Path, help="a checkout of another commit to compare with (run alternately)")
    parser.add_argument("--namespace", help="reuse this namespace (written by an earlier run): no log is written")
    args = parser.parse_args()
    with local_broker() as bootstrap:
        if args.namespace:
            settings = load_settings(bootstrap=bootstrap, namespace=args.namespace, state_dir=tempfile.mkdtemp())
        else:
            settings = fresh_settings(bootstrap, partitions=PARTITIONS)
            began = time.perf_counter()
            events = write_finished(settings, args.jobs)
            print(f"namespace {settings.namespace}: {events:,} events of {args.jobs:,} finished jobs "
                  f"({time.perf_counter() - began:.0f} s to write)")
        proc, _, log_path = start(settings, "first", ROOT)
        began = time.perf_counter()
        assert wait_log(log_path, r": active at epoch", PARTITIONS, 1800), log_path.read_text()[-2000:]
        print(f"engine A restored every partition in {time.perf_counter() - began:.1f} s")
        made = wait_log(log_path, r"partition \d+: (?:loaded the checkpoint|checkpoint at)", PARTITIONS, 300)
        print(f"engine A checkpointed {'every' if made else 'NOT every'} partition; stopping it")
        stop(proc)
        for run in range(args.runs):
            print(f"run {run + 1}:")
            cold_start(settings, "this checkout", ROOT, args.jobs)
            if args.base is not None:
                cold_start(settings, f"base {args.base}", args.base, args.jobs)


if __name__ == "__main__":
    main()
