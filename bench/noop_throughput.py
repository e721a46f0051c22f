"""No-op jobs end to end (submit -> completed) on one engine, transactions on.

Prints jobs/s and submit-to-start latency p50/p99 per run and the medians over runs.
Usage: python bench/noop_throughput.py [--jobs 20000] [--runs 3] [--partitions 6] [--rate JOBS_PER_S]
       [--task noop|noop_async] [--concurrency N] [--engines N] [--traced]
Without --concurrency the engine runs with its default settings, as `epochq engine run app:app` does.
Also prints the engine process's own CPU time per job (all its threads, from /proc) between the first
submit and the last completion, and beside it that of its children (the view process `engine run` keeps
by default): over the same window, and once the view has caught up ("settled").
With --traced every job is submitted under a span and the engine traces (bench/apps_traced.py): each
attempt runs in a span and every event carries the traceparent header (docs/tracing.md).
Without --rate every job is submitted at once (throughput; latency then includes the backlog);
with --rate the latency is that of a steady load below saturation.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    cpu_split, engine_process, follow_events, fresh_settings, local_broker, median, percentile, settled_cpu,
)
from engine.client import Client
from engine.contract import messages as m


@contextlib.contextmanager
def submitted_in_a_span(traced: bool) -> Iterator[None]:
    """The jobs submitted meanwhile carry a traceparent (a span context of our own: no SDK needed here)."""
    if not traced:
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    context = SpanContext(random.getrandbits(128), random.getrandbits(64), False, TraceFlags(1))
    with trace.use_span(NonRecordingSpan(context)):
        yield


def one_run(bootstrap: str, jobs: int, partitions: int, concurrency: int | None, rate: int = 0,
            engines: int = 1, task: str = "noop", extra: tuple[str, ...] = (),
            traced: bool = False) -> dict[str, float]:
    """Submit ``jobs`` no-op jobs while an engine runs them; measure throughput and latency."""
    settings = fresh_settings(bootstrap, partitions)
    issued: dict[str, int] = {}
    started: dict[str, int] = {}
    done: list[int] = []

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobStarted):
            started[event.job_id] = event.occurred_at
        elif isinstance(event.body, m.JobSucceeded):
            done.append(event.occurred_at)
        return len(done) >= jobs

    flags = (("--concurrency", str(concurrency)) if concurrency else ()) + extra
    app = "bench.apps_traced:app" if traced else "bench.apps:app"
    with engine_process(settings, app, *flags, instances=engines) as proc, submitted_in_a_span(traced):
        client = Client(settings)
        cpu0, view0 = cpu_split(proc.pid)
        follower = threading.Thread(target=follow_events, args=(settings, partitions, until, 600))
        follower.start()
        t0 = time.time()
        step = max(1, rate // 10) if rate else 2000
        for chunk in range(0, jobs, step):
            tick = time.monotonic()
            at = time.time_ns() // 1000
            handles = client.submit_many([{"task_type": task, "payload": {}, "tenant": f"t{i % 10}"}
                                          for i in range(chunk, min(jobs, chunk + step))])
            issued.update((h.job_id, at) for h in handles)
            if rate:
                time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
        submit_s = time.time() - t0
        follower.join()
        cpu, view = (now - then for now, then in zip(cpu_split(proc.pid), (cpu0, view0)))
        view_settled = settled_cpu(proc.pid) - view0
        client.close()
    elapsed = max(done) / 1e6 - t0
    lat = [(started[j] - issued[j]) / 1000 for j in issued if j in started]
    return {"jobs_per_s": jobs / elapsed, "submit_per_s": jobs / submit_s, "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99), "elapsed_s": elapsed, "cpu_us_per_job": cpu / jobs * 1e6,
            "view_us_per_job": view / jobs * 1e6, "view_settled_us_per_job": view_settled / jobs * 1e6}


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="NORMAL slots (default: the engine's default settings, no flag passed)")
    parser.add_argument("--task", default="noop", choices=["noop", "noop_async"],
                        help="the no-op handler: a plain function (runs in a lane thread) or async def")
    parser.add_argument("--engine-args", default="", help="extra flags for `epochq engine run`, e.g. '--processes 2'")
    parser.add_argument("--rate", type=int, default=0, help="submit at this many jobs/s (0: as fast as possible)")
    parser.add_argument("--engines", type=int, default=1, help="engine processes sharing the partitions")
    parser.add_argument("--traced", action="store_true", help="submit under a span, to an engine that traces")
    args = parser.parse_args()
    results = []
    with local_broker() as bootstrap:
        for n in range(args.runs):
            r = one_run(bootstrap, args.jobs, args.partitions, args.concurrency, args.rate, args.engines, args.task,
                        tuple(args.engine_args.split()), args.traced)
            results.append(r)
            print(f"run {n + 1}: {r['jobs_per_s']:8.0f} jobs/s end to end, "
                  f"engine CPU {r['cpu_us_per_job']:6.0f} µs/job, "
                  f"view CPU {r['view_us_per_job']:4.0f} µs/job ({r['view_settled_us_per_job']:.0f} settled), "
                  f"submit {r['submit_per_s']:8.0f}/s, "
                  f"submit->start p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  ({r['elapsed_s']:.1f} s)")
    offered = f"offered {args.rate}/s" if args.rate else "submitted at once"
    print(f"median over {args.runs} runs of {args.jobs} no-op jobs ({offered}), {args.partitions} partitions, "
          f"{args.engines} engine(s){', traced' if args.traced else ''}: "
          f"{median([r['jobs_per_s'] for r in results]):.0f} jobs/s, "
          f"engine CPU {median([r['cpu_us_per_job'] for r in results]):.0f} µs/job, "
          f"view CPU {median([r['view_us_per_job'] for r in results]):.0f} µs/job "
          f"({median([r['view_settled_us_per_job'] for r in results]):.0f} settled), "
          f"p50 {median([r['p50_ms'] for r in results]):.1f} ms, p99 {median([r['p99_ms'] for r in results]):.1f} ms")


if __name__ == "__main__":
    main()
