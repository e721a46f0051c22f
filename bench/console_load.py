"""What the console costs an engine it runs inside (``engine run --console-port``).

No-op jobs end to end (bench/noop_throughput.py's run) in four setups: no console; the console
served but idle; a busy operator (the overview's live part, a jobs page and a tenant search once a
second, where a browser tab asks for the overview every 5 s); a flood (the same pages in a loop, as
fast as answers come). Prints jobs/s, engine CPU per job and submit->start p50/p99 for each, and
the pages answered.
Usage: python bench/console_load.py [--jobs 10000] [--runs 1] [--partitions 6]
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2 as httpx

from bench.harness import local_broker, median
from bench.noop_throughput import one_run

PATHS = ("/overview/live", "/jobs?status=completed", "/jobs?tenant=t3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Poller:
    """Reads the console's pages in a loop until stopped; counts the answers and their time."""

    def __init__(self, port: int, pause_s: float):
        self.port, self.pause_s, self.stop, self.answered, self.seconds = port, pause_s, threading.Event(), 0, 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30) as web:
            while not self.stop.is_set():
                for path in PATHS:
                    t = time.monotonic()
                    try:
                        ok = web.get(path).status_code == 200
                    except httpx.TransportError:
                        time.sleep(0.2)  # the engine (and its console) is not up yet
                        continue
                    self.answered += ok
                    self.seconds += time.monotonic() - t
                self.stop.wait(self.pause_s)

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def main() -> None:
    """Run the three setups and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    with local_broker() as bootstrap:
        for name, pause in (("no console", None), ("console idle", None), ("busy operator", 1.0), ("flood", 0.0)):
            results, pages = [], ""
            for _ in range(args.runs):
                port = free_port()
                extra = () if name == "no console" else ("--console-port", str(port))
                if pause is not None:
                    with Poller(port, pause) as poller:
                        results.append(one_run(bootstrap, args.jobs, args.partitions, None, extra=extra))
                    pages = (f"; poller: {poller.answered} pages, "
                             f"{1000 * poller.seconds / max(1, poller.answered):.0f} ms each on average")
                else:
                    results.append(one_run(bootstrap, args.jobs, args.partitions, None, extra=extra))
            figure = {key: median([r[key] for r in results]) for key in results[0]}
            print(f"{name:15}: {figure['jobs_per_s']:7.0f} jobs/s, engine CPU {figure['cpu_us_per_job']:5.0f} µs/job, "
                  f"submit->start p50 {figure['p50_ms']:7.1f} ms p99 {figure['p99_ms']:7.1f} ms{pages}", flush=True)


if __name__ == "__main__":
    main()
