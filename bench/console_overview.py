"""What one refresh of the console's overview costs once its 4 s cache has expired, idle and while jobs run.

Starts an engine (``bench/apps.py``) on a fresh namespace of ``--partitions`` partitions, runs ``--jobs``
no-op jobs through it, then asks the overview (``engine.console.overview._overview``, what a refresh reads
when the cache is stale) ``--reads`` times with the engine idle, and as many times while a thread submits
``--rate`` jobs a second (the engine and its view writing their stores); and what a request for the overview
costs once its cache has expired (``overview``: the kept answer, renewed behind it). Prints p50 and p99 of
each, in ms.

``--root DIR``: the console code of another source tree (an older commit's, for a before/after figure); the
engine always runs from this one.

Usage: python bench/console_overview.py [--jobs 5000] [--partitions 6] [--reads 30] [--rate 100] [--root DIR]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

BENCH_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    args = _args()
    sys.path.insert(0, str(args.root or BENCH_ROOT))
    sys.path.insert(1, str(BENCH_ROOT))
    from bench.harness import engine_process, fresh_settings, local_broker, percentile

    with local_broker() as bootstrap:
        settings = fresh_settings(bootstrap, args.partitions)
        with engine_process(settings, "bench.apps:app"):
            engine_settings = settings.model_copy(update={"state_dir": Path(settings.state_dir) / "engine-0"})
            _run_jobs(engine_settings, args.jobs)
            idle = _refreshes(engine_settings, args.reads)
            busy = _under_load(engine_settings, args.reads, args.rate)
    print(f"{args.jobs} jobs, {args.partitions} partitions, {args.reads} refreshes each:")
    for name, (read, served) in (("idle", idle), (f"{args.rate:g} jobs/s running", busy)):
        for what, took in (("read afresh", read), ("request, cache expired", served)):
            print(f"  overview {what}, {name}: p50 {percentile(took, 50):.1f} ms, p99 {percentile(took, 99):.1f} ms")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--reads", type=int, default=30)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--root", type=Path, default=None)
    return parser.parse_args()


def _run_jobs(settings, count: int) -> None:  # type: ignore[no-untyped-def]
    from engine.client import Client
    from engine.questions.jobs import JobFilter, list_jobs

    with Client(settings) as client:
        client.wait_all([client.submit("noop", {}, tenant=f"t{n % 20}") for n in range(count)], 600)
    deadline = time.monotonic() + 120
    while list_jobs(settings, JobFilter(status="completed"), limit=1).counts.get("completed", 0) < count:
        if time.monotonic() > deadline:
            raise TimeoutError("the view did not fold every job")
        time.sleep(0.5)


def _refreshes(settings, reads: int) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    """(what reading the overview afresh took, what a request for it took with its cache expired), in ms."""
    from engine.console.overview import _overview, overview
    from engine.console.reads import Cache, LogProbe, Reads

    console = Reads(settings, LogProbe(settings), Cache(0.0))  # every request finds its answer past the ttl
    _overview(console)  # the first read follows the log's last 3 hours once: not a refresh
    overview(console)
    took: tuple[list[float], list[float]] = ([], [])
    for ask, into in ((_overview, took[0]), (overview, took[1])):  # one after the other: renewals run behind
        for _ in range(reads):
            start = time.perf_counter()
            ask(console)
            into.append((time.perf_counter() - start) * 1000)
            time.sleep(0.2)
    console.close()
    return took


def _under_load(settings, reads: int, rate: float) -> tuple[list[float], list[float]]:  # type: ignore[no-untyped-def]
    from engine.client import Client

    stop = threading.Event()

    def submit() -> None:
        with Client(settings) as client:
            while not stop.is_set():
                client.submit("noop", {}, tenant="load")
                time.sleep(1 / rate)

    thread = threading.Thread(target=submit, daemon=True)
    thread.start()
    try:
        time.sleep(2)
        return _refreshes(settings, reads)
    finally:
        stop.set()
        thread.join(10)


if __name__ == "__main__":
    main()
