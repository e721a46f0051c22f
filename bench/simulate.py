"""``epochq simulate`` against reality, and how fast it replays.

1. Fidelity: a real engine (NORMAL lane, --slots NORMAL=4) is given more work than it can start
   at once — three tenants (70, 20 and 10 jobs a second of 50 ms each, against a capacity of 80 a
   second) for --seconds — so a backlog builds and waits grow to seconds. Then the recorded log is
   replayed with the recorded settings (4 slots, equal weights): per tenant, the recorded and the
   simulated wait (ready -> first start) p50/p99, and the simulated/recorded ratio.
2. Speed: synthetic recorded jobs (--jobs, 20 tenants, 1 ms each, 16 slots) replayed in process: jobs/s.
Usage: python bench/simulate.py [--seconds 10] [--jobs 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import engine_process, fresh_settings, local_broker
from engine.client import Client
from engine.domain.lanes import Lane
from engine.questions.recorded import recorded_events
from engine.testing.virtual import Setup
from engine.testing.simulate import RecordedJob, Scenario, Simulated, compare, recorded_jobs, simulate

RATES = {"heavy": 70, "medium": 20, "light": 10}


def fidelity(bootstrap: str, seconds: int) -> None:
    settings = fresh_settings(bootstrap, 3)
    client = Client(settings)
    handles = []
    with engine_process(settings, "bench.apps:app", "--slots", "NORMAL=4"):
        for _ in range(seconds):
            tick = time.monotonic()
            batch = [{"task_type": "work", "payload": {"seconds": 0.05}, "tenant": t}
                     for t, n in RATES.items() for _ in range(n)]
            handles += client.submit_many(batch)
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        outcomes = client.wait_all(handles, 300)
    client.close()
    print(f"1. fidelity: {len(handles)} jobs, {sum(o.status == 'completed' for o in outcomes)} completed on a real "
          "engine (4 NORMAL slots, 50 ms each); replayed with the recorded settings:")
    jobs = recorded_jobs(recorded_events(settings))
    for partitions in (1, 3):
        sim = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 4}, partitions=partitions)))
        _table(jobs, sim, partitions)


def _table(jobs: list[RecordedJob], sim: Simulated, partitions: int) -> None:
    print(f"   replayed as {partitions} partition(s):")
    print(f"   {'tenant':8} {'jobs':>5}  {'recorded p50/p99 ms':>20}  {'simulated p50/p99 ms':>21}  ratio p50/p99")
    for row in compare(jobs, sim):
        rec = (row.recorded_p50_ms or 0.0, row.recorded_p99_ms or 0.0)
        simd = (row.simulated_p50_ms or 0.0, row.simulated_p99_ms or 0.0)
        ratios = "/".join(f"{s / r:.2f}" if r else "-" for s, r in zip(simd, rec))
        print(f"   {row.tenant:8} {row.jobs:5d}  {rec[0]:9.0f} {rec[1]:10.0f}  "
              f"{simd[0]:10.0f} {simd[1]:10.0f}  {ratios}")


def speed(n: int) -> None:
    t0 = 1_780_000_000_000_000
    jobs = [RecordedJob(f"j{i}", f"t{i % 20}", "work", 5, "NORMAL", 3, t0 + i * 500, None, {1: ("succeeded", 1000)})
            for i in range(n)]
    started = time.perf_counter()
    sim = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 16})))
    seconds = time.perf_counter() - started
    print(f"2. speed: {n} recorded jobs (20 tenants, 1 ms each, 16 slots) replayed in {seconds:.2f} s: "
          f"{n / seconds:.0f} jobs/s ({sim.unstarted} unstarted)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    speed(args.jobs)
    with local_broker() as bootstrap:
        fidelity(bootstrap, args.seconds)


if __name__ == "__main__":
    main()
