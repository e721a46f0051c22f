"""No-op jobs through one engine that runs them itself against one engine that only decides and two remote
workers (docs/workers.md), in the same run: jobs/s end to end and the engine process's CPU per job.

Usage: python bench/remote_workers.py [--jobs 5000] [--partitions 6] [--concurrency 50] [--runs 1]
       python bench/remote_workers.py --burn [--seconds 8] [--rate 50]
The engine's CPU is its own threads' (from /proc), between the first submit and the last completion;
the workers' CPU is reported beside it. The last line compares the two set-ups' medians: the engine's CPU per job
remote against in process (issue 33: it must fall) and jobs/s. A figure, not a test: the machine's load moves it.

``--burn``: a CPU-bound handler (50 ms of pure Python, bench/apps_burn.py) kept busy in 8 slots, in the
engine's process or in one worker of pool ``cpu``, while no-op jobs are submitted at ``--rate`` a second:
their submit-to-start latency (p50, p99) is the decision loop's, beside the burning handler or apart from it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    ROOT, cpu_seconds, cpu_split, engine_process, follow_events, fresh_settings, local_broker, percentile,
)
from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m


@contextlib.contextmanager
def worker_processes(settings: Settings, count: int, concurrency: int, pool: str = "default",
                     app: str = "bench.apps:app") -> Iterator[list[subprocess.Popen]]:
    """``count`` workers of ``pool`` in processes of their own."""
    procs = []
    try:
        for n in range(count):
            log = open(Path(settings.state_dir) / f"worker-{n}.log", "w")
            cmd = [sys.executable, "-m", "engine.cli.main", "worker", "run", app, "--bootstrap",
                   settings.require_bootstrap(), "--namespace", settings.namespace, "--pool", pool,
                   "--concurrency", str(concurrency), "--worker-id", f"bench-w{n}"]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                          env={**os.environ, "PYTHONPATH": str(ROOT)}))
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)


def one_run(bootstrap: str, jobs: int, partitions: int, workers: int, concurrency: int) -> dict[str, float]:
    """Submit ``jobs`` no-op jobs at once; with ``workers`` > 0 the engine runs --no-execute beside them."""
    settings = fresh_settings(bootstrap, partitions)
    done: list[int] = []

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobSucceeded):
            done.append(event.occurred_at)
        return len(done) >= jobs

    flags = ("--no-execute",) if workers else ("--concurrency", str(concurrency))
    with worker_processes(settings, workers, concurrency) as pool, \
            engine_process(settings, "bench.apps:app", "--no-view", *flags) as proc:
        time.sleep(3 if workers else 0)  # the workers' first heartbeats: the engine dispatches to known slots
        client = Client(settings)
        cpu0, _ = cpu_split(proc.pid)
        workers0 = [cpu_seconds(w.pid) for w in pool]
        follower = threading.Thread(target=follow_events, args=(settings, partitions, until, 600))
        follower.start()
        t0 = time.time()
        for chunk in range(0, jobs, 2000):
            client.submit_many([{"task_type": "noop", "payload": {}, "tenant": f"t{i % 10}"}
                                for i in range(chunk, min(jobs, chunk + 2000))])
        follower.join()
        cpu = cpu_split(proc.pid)[0] - cpu0
        worker_cpu = sum(cpu_seconds(w.pid) - c for w, c in zip(pool, workers0))
        client.close()
    elapsed = max(done) / 1e6 - t0
    return {"jobs_per_s": jobs / elapsed, "engine_us_per_job": cpu / jobs * 1e6,
            "workers_us_per_job": worker_cpu / jobs * 1e6, "elapsed_s": elapsed}


def burn_run(bootstrap: str, partitions: int, remote: bool, seconds: float, rate: int) -> dict[str, float]:
    """No-op jobs at ``rate``/s for ``seconds`` beside burning jobs (in the engine, or in a worker of pool cpu)."""
    settings = fresh_settings(bootstrap, partitions)
    issued: dict[str, int] = {}
    started: dict[str, int] = {}
    noops = int(seconds * rate)

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobStarted) and event.job_id in issued:
            started[event.job_id] = event.occurred_at
        return len(started) >= noops

    os.environ["EPOCHQ_BENCH_BURN_POOL"] = "cpu" if remote else ""
    with contextlib.ExitStack() as stack:
        if remote:
            stack.enter_context(worker_processes(settings, 1, 8, "cpu", "bench.apps_burn:app"))
        stack.enter_context(engine_process(settings, "bench.apps_burn:app", "--no-view", "--slots", "NORMAL=8",
                                           "--slots", "LOW=8"))
        time.sleep(3 if remote else 0)
        client = Client(settings)
        client.submit_many([{"task_type": "burn", "payload": {}, "tenant": "burner", "priority": 1}
                            for _ in range(int(seconds / 0.05 * 8 * 1.5))])  # keeps 8 slots burning throughout
        follower = threading.Thread(target=follow_events, args=(settings, partitions, until, 600))
        follower.start()
        for _ in range(int(seconds * 10)):
            tick = time.monotonic()
            at = time.time_ns() // 1000
            handles = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "quick", "priority": 5}
                                          for _ in range(rate // 10)])
            issued.update((h.job_id, at) for h in handles)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        follower.join()
        client.close()
    lat = [(started[j] - issued[j]) / 1000 for j in issued if j in started]
    return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "n": len(lat)}


def main() -> None:
    """Run both set-ups once each, in the same run, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=50, help="slots: the engine's NORMAL lane, each worker's")
    parser.add_argument("--runs", type=int, default=1, help="pairs of runs, alternating; medians printed")
    parser.add_argument("--burn", action="store_true", help="the decision latency beside a CPU-bound handler")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=int, default=50)
    args = parser.parse_args()
    if args.burn:
        with local_broker() as bootstrap:
            for label, remote in (("burn in the engine's process", False), ("burn in a worker of pool cpu", True)):
                r = burn_run(bootstrap, args.partitions, remote, args.seconds, args.rate)
                print(f"{label:30} no-op submit->start p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms "
                      f"({r['n']} no-op jobs at {args.rate}/s)")
        return
    setups = (("in process (1 engine)", 0), ("remote (1 engine --no-execute + 2 workers)", 2))
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in setups}
    with local_broker() as bootstrap:
        for _ in range(args.runs):
            for label, workers in setups:  # alternating: the machine's load moves both alike
                r = one_run(bootstrap, args.jobs, args.partitions, workers, args.concurrency)
                r["load"] = os.getloadavg()[0]
                runs[label].append(r)
                print(f"{label:45} {r['jobs_per_s']:7.0f} jobs/s, engine CPU {r['engine_us_per_job']:6.0f} µs/job, "
                      f"workers' CPU {r['workers_us_per_job']:6.0f} µs/job ({r['elapsed_s']:.1f} s, {args.jobs} jobs, "
                      f"load {r['load']:.1f})", flush=True)
    if args.runs > 1:
        for label, rs in runs.items():
            print(f"median of {len(rs)}: {label:45} " + ", ".join(
                f"{key} {statistics.median(r[key] for r in rs):.0f}"
                for key in ("jobs_per_s", "engine_us_per_job", "workers_us_per_job", "load")))
    print(comparison(*runs.values()))


def comparison(local: list[dict[str, float]], remote: list[dict[str, float]]) -> str:
    """Remote against in process, medians of the runs: the engine's CPU per job (which must fall) and jobs/s."""
    cpu = [statistics.median(r["engine_us_per_job"] for r in rs) for rs in (local, remote)]
    rate = [statistics.median(r["jobs_per_s"] for r in rs) for rs in (local, remote)]
    return (f"remote against in process ({len(remote)} runs each): engine CPU {cpu[0]:.0f} -> {cpu[1]:.0f} µs/job "
            f"({(cpu[1] / cpu[0] - 1) * 100:+.0f} %, {'falls' if cpu[1] < cpu[0] else 'does NOT fall'}), "
            f"{rate[0]:.0f} -> {rate[1]:.0f} jobs/s ({(rate[1] / rate[0] - 1) * 100:+.0f} %)")


if __name__ == "__main__":
    main()
