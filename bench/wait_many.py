"""What waiting costs a client: ``handle.wait()`` one by one, ``Client.wait_all`` and ``as_completed``.

A fresh namespace (6 partitions) and one engine running ``bench.apps:app``; ``--jobs`` no-op
jobs are submitted with ``submit_many`` and waited for, then waited for again once all are
finished (the case the one-reader follower is for: a finished job's ``wait()``). Prints the
time of each way, and per job.

Usage: python bench/wait_many.py [--jobs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import engine_process, fresh_settings, local_broker
from engine.client import Client, JobHandle


def one_by_one(client: Client, handles: list[JobHandle]) -> list[float]:
    """Seconds of each handle's ``wait()``."""
    took = []
    for handle in handles:
        start = time.perf_counter()
        assert handle.wait(60).done
        took.append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    with local_broker() if not os.environ.get("EPOCHQ_BOOTSTRAP") else nullcontext(os.environ["EPOCHQ_BOOTSTRAP"]) \
            as bootstrap:
        settings = fresh_settings(bootstrap, 6)
        with engine_process(settings, "bench.apps:app"), Client(settings) as client:
            handles = client.submit_many([{"task_type": "noop", "tenant": "t", "payload": {}}] * args.jobs)
            start = time.perf_counter()
            outcomes = client.wait_all(handles, 120)
            live = time.perf_counter() - start
            assert all(o.status == "completed" for o in outcomes), {o.status for o in outcomes}
            print(f"wait_all, {args.jobs} jobs while they run: {live:.3f} s")
            start = time.perf_counter()
            client.wait_all(handles, 60)
            print(f"wait_all, {args.jobs} finished jobs:        {time.perf_counter() - start:.3f} s")
            start = time.perf_counter()
            done = sum(1 for o in client.as_completed(handles, 60) if o.done)
            print(f"as_completed, {done} finished jobs:       {time.perf_counter() - start:.3f} s")
            took = one_by_one(client, handles)
            print(f"handle.wait() one by one, {args.jobs} finished jobs: {sum(took):.3f} s; per job median "
                  f"{statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
