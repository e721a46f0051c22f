"""Fair queuing under a noisy tenant: served shares vs weights, quiet tenants' queueing delay, FQ overhead.

1. Shares: 100 tenants (weights 1, 2 and 5) all backlogged; the share of the first starts
   each weight class gets, against its weight share.
2. Delay: 100 quiet tenants submit 1 job/s each for 20 s, alone, then with one noisy tenant
   at --noisy-rate jobs/s (default 300: with the quiet ones 400/s against a capacity of
   4 slots x 20 ms = 200 jobs/s, so a backlog grows); p50/p99 submit->start delay of the
   quiet tenants, with weighted fair queuing and with FIFO across tenants.
3. Overhead: no-op throughput with fair queuing vs FIFO (bench/noop_throughput.py's method).
Usage: python bench/fairness.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import engine_process, follow_events, fresh_settings, local_broker, percentile
from engine.client import Client
from engine.contract import messages as m
from engine.runtime.tenants import set_tenant

WEIGHTS = {**{f"q{i:02d}": 1.0 for i in range(50)}, **{f"q{i:02d}": 2.0 for i in range(50, 80)},
           **{f"q{i:02d}": 5.0 for i in range(80, 100)}}


def shares(bootstrap: str) -> None:
    """Every tenant backlogged: does each weight class get its weight share of the starts?"""
    settings = fresh_settings(bootstrap, 6)
    for tenant, weight in WEIGHTS.items():
        set_tenant(settings, tenant, weight)
    client = Client(settings)
    jobs = [{"task_type": "work", "payload": {"seconds": 0.001}, "tenant": t} for t in WEIGHTS for _ in range(300)]
    client.submit_many(jobs)
    starts: list[tuple[int, str]] = []
    with engine_process(settings, "bench.apps:app", "--concurrency", "8"):
        follow_events(settings, 6, lambda e: isinstance(e.body, m.JobStarted) and
                      starts.append((e.occurred_at, e.tenant_id)) is None and len(starts) >= 5000, 600)
    window = [tenant for _, tenant in sorted(starts)[1000:4000]]  # in time order, past the first round
    counts = Counter(window)
    total_w = sum(WEIGHTS.values())
    print("1. shares of 3000 starts (the 1001st to the 4000th), all 100 tenants backlogged:")
    for weight in (1.0, 2.0, 5.0):
        members = [t for t, w in WEIGHTS.items() if w == weight]
        served = sum(counts[t] for t in members) / len(window)
        owed = weight * len(members) / total_w
        print(f"   weight {weight:g} ({len(members)} tenants): served {served:.3f}, weight share {owed:.3f}")
    client.close()


def delays(bootstrap: str, seconds: float, noisy: int, fifo: bool) -> tuple[float, float]:
    """Quiet tenants' submit->start delay (p50, p99 ms), with or without a noisy tenant."""
    settings = fresh_settings(bootstrap, 6)
    client = Client(settings)
    issued: dict[str, int] = {}
    started: dict[str, int] = {}
    expected = int(seconds) * 100
    extra = ("--fifo",) if fifo else ()
    with engine_process(settings, "bench.apps:app", "--concurrency", "16", *extra):
        follower = threading.Thread(target=follow_events,
                                    args=(settings, 6, lambda e: _started(e, started, issued, expected), 600))
        follower.start()
        for _ in range(int(seconds)):
            tick = time.monotonic()
            batch = [{"task_type": "work", "payload": {"seconds": 0.02}, "tenant": t} for t in WEIGHTS]
            if noisy:
                batch += [{"task_type": "work", "payload": {"seconds": 0.02}, "tenant": "noisy"} for _ in range(noisy)]
            at = time.time_ns() // 1000
            for handle in client.submit_many(batch)[:len(WEIGHTS)]:  # the quiet tenants' jobs come first
                issued[handle.job_id] = at
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        follower.join()
    quiet = [(started[j] - issued[j]) / 1000 for j in issued if j in started]
    client.close()
    return percentile(quiet, 50), percentile(quiet, 99)


def _started(event: m.Event, started: dict[str, int], issued: dict[str, int], expected: int) -> bool:
    if isinstance(event.body, m.JobStarted) and event.tenant_id != "noisy":
        started[event.job_id] = event.occurred_at
    return len([j for j in started if j in issued]) >= expected


def main() -> None:
    """Run the three parts and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--noisy-rate", type=int, default=300, help="the noisy tenant's jobs/s")
    args = parser.parse_args()
    with local_broker() as bootstrap:
        shares(bootstrap)
        print(f"2. quiet tenants (100 x 1 job/s, {args.seconds:g} s; 16 NORMAL slots, 20 ms jobs) "
              "submit->start delay, ms:")
        for label, noisy, fifo in (("alone, fair", 0, False),
                                   (f"with noisy {args.noisy_rate}/s, fair", args.noisy_rate, False),
                                   (f"with noisy {args.noisy_rate}/s, FIFO", args.noisy_rate, True)):
            p50, p99 = delays(bootstrap, args.seconds, noisy, fifo)
            print(f"   {label:28} p50 {p50:8.1f}  p99 {p99:8.1f}")


if __name__ == "__main__":
    main()
