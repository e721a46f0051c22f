"""How closely a per-task-type rate limit holds, and that other task types are not held up by it.

Limits ``noop`` to RATE/s (``Client.set_rate_limit``), submits JOBS ``noop`` jobs and then OTHERS
``noop_async`` jobs (same tenants and lane, queued behind them) at once, and prints, from the
events' times: the achieved start rate of the limited type, the most starts in any one-second
window, how long the other type's jobs took, and the time to the first and last limited start.
Usage: python bench/rate_limit.py [--jobs 200] [--rate 50] [--burst 1] [--others 2000] [--partitions 6]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import engine_process, follow_events, fresh_settings, local_broker
from engine.client import Client
from engine.contract import messages as m


def one_run(bootstrap: str, jobs: int, rate: float, burst: int, others: int, partitions: int) -> dict[str, float]:
    """Run once; the figures, in seconds and starts per second."""
    settings = fresh_settings(bootstrap, partitions)
    limited: set[str] = set()
    starts: dict[str, list[int]] = {"noop": [], "noop_async": []}
    done: list[int] = []
    kinds: dict[str, str] = {}

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobSubmitted):
            kinds[event.job_id or ""] = event.body.task_type
        elif isinstance(event.body, m.JobStarted):
            starts[kinds.get(event.job_id or "", "noop")].append(event.occurred_at)
        elif isinstance(event.body, m.JobSucceeded):
            done.append(event.occurred_at)
        return len(done) >= jobs + others

    with engine_process(settings, "bench.apps:app") as _proc:
        client = Client(settings)
        client.set_rate_limit("noop", rate, burst=burst, reason="bench")
        follower = threading.Thread(target=follow_events, args=(settings, partitions, until, 600))
        follower.start()
        t0 = time.time_ns() // 1000
        limited.update(h.job_id for h in client.submit_many(
            [{"task_type": "noop", "payload": {}, "tenant": f"t{i % 10}"} for i in range(jobs)]))
        client.submit_many([{"task_type": "noop_async", "payload": {}, "tenant": f"t{i % 10}"} for i in range(others)])
        follower.join()
        client.close()
    lim, oth = sorted(starts["noop"]), sorted(starts["noop_async"])
    window = max(sum(1 for t in lim if s <= t < s + 1_000_000) for s in lim)
    span = (lim[-1] - lim[0]) / 1e6
    return {"achieved": (len(lim) - 1) / span if span else float("inf"), "window": window, "span_s": span,
            "others_s": (oth[-1] - t0) / 1e6, "first_s": (lim[0] - t0) / 1e6}


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--burst", type=int, default=1)
    parser.add_argument("--others", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    with local_broker() as bootstrap:
        r = one_run(bootstrap, args.jobs, args.rate, args.burst, args.others, args.partitions)
    print(f"{args.jobs} jobs limited to {args.rate:g}/s (burst {args.burst}, {args.partitions} partitions): "
          f"started over {r['span_s']:.2f} s = {r['achieved']:.1f}/s achieved, at most {r['window']:.0f} in any "
          f"1 s window (limit {args.rate:g} + up to {max(args.burst, args.partitions)} at once); first after "
          f"{r['first_s']:.2f} s. {args.others} unlimited jobs queued behind them: all started within "
          f"{r['others_s']:.2f} s")


if __name__ == "__main__":
    main()
