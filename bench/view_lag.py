"""The view's lag at a steady load, and its CPU per job.

An engine (``--no-view``) runs no-op jobs submitted at a fixed rate; a view (``epochq view run``)
folds every partition into a state directory of its own. Every 100 ms a sampler (a process of its own) notes the end
offset of every events partition; the lag of that sample is how long the view took to fold up to
those ends (its applied offsets, read as ``view status`` reads them). It also samples ``view
status``'s figure with them: the records not folded yet. Prints p50/p99/max of both, and the view process's
CPU time (from /proc) over the run, per offset folded and per no-op job (NOOP_OFFSETS offsets).

Usage: python bench/view_lag.py [--rate 1000] [--seconds 30] [--partitions 6] [--runs 1]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import ROOT, cpu_seconds, engine_process, fresh_settings, local_broker, median, percentile
from engine.client import Client
from engine.config import Settings
from engine.runtime import kafka
from engine.questions.view_status import PartitionLag
from projections.lock import holder_of
from engine.questions.readers import Readers
from projections.store import view_root

SAMPLE_S = 0.1
NOOP_OFFSETS = 5
"""Offsets of the events topic one no-op job takes: JobSubmitted, JobQueued, JobStarted, JobSucceeded, and a
share of the commit markers (one per partition per transaction), taken as one (an estimate: fewer under load)."""


def start_view(settings: Settings) -> subprocess.Popen[bytes]:
    """``epochq view run`` on the benchmark's state directory, its output in view.log there."""
    log = open(Path(settings.state_dir) / "view.log", "w")
    cmd = [sys.executable, "-m", "engine.cli.main", "view", "run", "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace, "--state-dir", str(settings.state_dir)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    deadline = time.monotonic() + 60
    while holder_of(view_root(settings.state_dir, settings.namespace)) is None:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the view did not start: " + (Path(settings.state_dir) / "view.log").read_text())
        time.sleep(0.1)
    return proc


def sample(settings: Settings, stop: Any, out: Any) -> None:
    """In a process of its own (the submitter keeps its GIL): every SAMPLE_S note the log's ends, when the view
    reached each, and the records it trailed by then (``view status``'s lag); sends (lags_s, records) when stopped."""
    reader, readers = kafka.events_reader(settings, "bench-lag"), Readers()
    partitions = kafka.topic_partitions(reader, settings.events_topic, "read")
    pending: list[tuple[float, dict[int, int]]] = []
    lags_s: list[float] = []
    records: list[int] = []
    last = 0.0
    try:
        while not (stop.is_set() and not pending):
            now = time.monotonic()
            applied = {p: s.applied_offset() for p, s in readers.stores(settings)}
            if now - last >= SAMPLE_S and not stop.is_set():
                last = now
                ends = kafka.end_offsets(reader, settings.events_topic, partitions)
                pending.append((now, ends))
                records.append(sum(PartitionLag(p, end, applied.get(p, -1), 0).lag for p, end in ends.items()))
            for t, ends in list(pending):
                if all(applied.get(p, -1) + 1 >= end for p, end in ends.items()):
                    lags_s.append(time.monotonic() - t)
                    pending.remove((t, ends))
            time.sleep(0.03)
    finally:
        reader.close()
        out.send((lags_s, records))


def one_run(bootstrap: str, rate: int, seconds: float, partitions: int) -> dict[str, float]:
    """Submit ``rate`` jobs/s for ``seconds`` with a view following; its lag and CPU per job."""
    settings = fresh_settings(bootstrap, partitions)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    receive, send = context.Pipe(duplex=False)
    with engine_process(settings, "bench.apps:app", "--no-view"):
        view = start_view(settings)
        client = Client(settings)
        sampler = context.Process(target=sample, args=(settings, stop, send), daemon=True)
        try:
            cpu0 = cpu_seconds(view.pid)
            sampler.start()
            jobs, t0 = 0, time.monotonic()
            while (elapsed := time.monotonic() - t0) < seconds:  # catch up with the schedule after a slow flush
                due = min(int(elapsed * rate) + rate // 10, round(seconds * rate)) - jobs
                if due > 0:
                    client.submit_many([{"task_type": "noop", "payload": {}, "tenant": f"t{i % 10}"}
                                        for i in range(due)])
                    jobs += due
                time.sleep(0.02)
            offered = jobs / (time.monotonic() - t0)
            stop.set()
            lags, records = receive.recv()  # once the view has reached the last sample's ends
            cpu = cpu_seconds(view.pid) - cpu0
            events = sum(store.applied_offset() + 1 for _, store in Readers().stores(settings))
            sampler.join(30)
        finally:
            stop.set()
            client.close()
            view.terminate()
            view.wait(30)
    return {"offered": offered, "jobs": jobs, "p50_ms": percentile(lags, 50) * 1000,
            "p99_ms": percentile(lags, 99) * 1000,
            "max_ms": max(lags) * 1000, "samples": len(lags), "records_p50": percentile(records, 50),
            "records_p99": percentile(records, 99), "cpu_us_per_offset": cpu / max(1, events) * 1e6,
            "cpu_us_per_job": cpu / max(1, events) * 1e6 * NOOP_OFFSETS}


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=1000, help="jobs submitted per second")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    results = []
    with local_broker() as bootstrap:
        for n in range(args.runs):
            r = one_run(bootstrap, args.rate, args.seconds, args.partitions)
            results.append(r)
            print(f"run {n + 1}: offered {r['offered']:.0f} jobs/s ({r['jobs']:.0f} jobs): view lag p50 "
                  f"{r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, max {r['max_ms']:.0f} ms "
                  f"({r['samples']:.0f} samples); `view status` lag p50 {r['records_p50']:.0f}, "
                  f"p99 {r['records_p99']:.0f} records; view CPU {r['cpu_us_per_offset']:.0f} µs/offset, "
                  f"{r['cpu_us_per_job']:.0f} µs per no-op job")
    print(f"median over {args.runs} run(s) at {args.rate} jobs/s, {args.partitions} partitions: lag p50 "
          f"{median([r['p50_ms'] for r in results]):.0f} ms, p99 {median([r['p99_ms'] for r in results]):.0f} ms; "
          f"view CPU {median([r['cpu_us_per_job'] for r in results]):.0f} µs/job")


if __name__ == "__main__":
    main()
