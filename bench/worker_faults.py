"""Remote workers under faults (issue 33): 500 attempts in flight on two workers of pool ``hold`` (lease 5 s).

- ``kill``: one worker is killed (SIGKILL) with its attempts running: every job must end once; the figure is
  how long after the kill its attempts started again elsewhere (the lease, plus the group's session timeout
  for records already dispatched to the dead worker's partitions) — the issue asks ≤ lease + 5 s.
- ``stop``: one worker is stopped (SIGSTOP) for lease + 3 s, then resumed: its late results are refused
  (``CommandRefused``, ``stale_token``), counted; every job still ends once.

Usage: python bench/worker_faults.py [--jobs 500] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import engine_process, fresh_settings, local_broker
from bench.remote_workers import worker_processes
from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.questions.history import scan_partition
from engine.runtime import kafka

APP = "bench.apps_burn:app"
LEASE_S = 5.0


def log_bodies(settings: Settings, partitions: int) -> dict[str, list[tuple[m.Event, m.EventBody]]]:
    """Every job's events, read from the log."""
    from engine.contract.codec import decode_event_at

    out: dict[str, list[tuple[m.Event, m.EventBody]]] = defaultdict(list)
    consumer = kafka.events_reader(settings, "bench-faults")
    try:
        for p in range(partitions):
            for o, _, v in scan_partition(consumer, settings.events_topic, p):
                event = decode_event_at(v, settings.events_topic, p, o)
                out[event.job_id or ""].append((event, event.body))
    finally:
        consumer.close()
    return out


def one_run(bootstrap: str, fault: str, jobs: int, seconds: float, partitions: int = 6) -> dict[str, float]:
    settings = fresh_settings(bootstrap, partitions)
    os.environ["EPOCHQ_BENCH_BURN_POOL"] = ""
    with worker_processes(settings, 2, jobs // 2 + 10, "hold", APP) as pool, \
            engine_process(settings, APP, "--no-view"):
        time.sleep(3)
        client = Client(settings)
        handles = client.submit_many([{"task_type": "hold", "payload": {"seconds": seconds}, "tenant": f"t{i % 10}"}
                                      for i in range(jobs)])
        client.wait_all(handles, 120, until=lambda o: o.status == "running" or o.done)  # all 500 out with workers
        time.sleep(1.0)  # the workers took them (the engine's JobStarted precedes the worker's take)
        victim = pool[0]
        at = time.time()
        if fault == "kill":
            victim.send_signal(signal.SIGKILL)
        else:
            victim.send_signal(signal.SIGSTOP)
            threading.Timer(LEASE_S + 3, lambda: victim.send_signal(signal.SIGCONT)).start()
        outcomes = client.wait_all(handles, 180)
        time.sleep(LEASE_S + 5 if fault == "stop" else 0)  # the resumed worker's late results
        client.close()
        found = log_bodies(settings, partitions)
    ends = Counter()
    restarted: list[float] = []
    refused = 0
    for h in handles:
        events = found[h.job_id]
        ends[sum(isinstance(b, m.JobSucceeded) for _, b in events)] += 1
        per_attempt = Counter(b.attempt for _, b in events if isinstance(b, (m.JobSucceeded, m.JobFailed)))
        assert all(n == 1 for n in per_attempt.values()), (h.job_id, per_attempt)
        again = [e.occurred_at / 1e6 - at for e, b in events if isinstance(b, m.JobStarted) and b.attempt > 1]
        restarted += again[:1]
        refused += sum(isinstance(b, m.CommandRefused) and b.reason.startswith("stale_token") for _, b in events)
    return {"completed": sum(o.status == "completed" for o in outcomes), "one_success": ends[1],
            "retried": len(restarted), "restart_max_s": max(restarted, default=0.0),
            "restart_p50_s": sorted(restarted)[len(restarted) // 2] if restarted else 0.0, "refused": refused}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with local_broker() as bootstrap:
        for fault in ("kill", "stop"):
            r = one_run(bootstrap, fault, args.jobs, args.seconds)
            print(f"{fault:5}: {r['completed']}/{args.jobs} completed, {r['one_success']} with exactly one "
                  f"JobSucceeded, {r['retried']} retried; re-started {r['restart_p50_s']:.1f} s (p50) / "
                  f"{r['restart_max_s']:.1f} s (max) after the {fault} (lease {LEASE_S:g} s); "
                  f"{r['refused']} late result(s) refused (stale_token)")


if __name__ == "__main__":
    main()
