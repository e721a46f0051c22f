"""A fan-in: one job waiting for 10,000 jobs across 6 partitions; what its release costs and how long it takes.

Each run is a fresh namespace and one engine (``bench.apps:app``):

1. baseline: ``--deps`` no-op jobs due a few seconds after their submission, nobody waiting for them; the
   engine's CPU from their submission to the last one's end;
2. fan-in: ``--deps`` - 1 such no-op jobs and one ``gate`` job (running until the benchmark opens it), then a
   ``fan_in`` job that depends on all of them; once the no-op jobs have all been reported to it, the gate
   opens, and the release latency is the time from the gate's ``JobSucceeded`` to the dependent's
   ``JobStarted`` (both engine timestamps, in the log). The engine's CPU over the same span as in 1, less the
   baseline's, divided by ``--deps``: the CPU one release costs (an AwaitJob decided, a DependentAdded, a
   ReportDependency sent, a DependencyReported folded).

Usage: python bench/fan_in.py [--deps 10000] [--runs 3] [--partitions 6]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import cpu_seconds, engine_process, fresh_settings, local_broker, median, percentile
from engine.client import Client, JobHandle

DELAY_S = 8.0
"""How far ahead the no-op jobs are due: long enough for the dependent's 10,000 AwaitJob to be decided first."""


def scheduled_noops(client: Client, count: int) -> list[JobHandle]:
    """``count`` no-op jobs due DELAY_S from now."""
    return client.submit_many([{"task_type": "noop", "tenant": "t", "payload": {}, "delay": DELAY_S}] * count)


def baseline(client: Client, pid: int, deps: int) -> float:
    """Engine CPU seconds of ``deps`` scheduled no-op jobs that nobody waits for."""
    cpu0 = cpu_seconds(pid)
    outcomes = client.wait_all(scheduled_noops(client, deps), 600)
    assert all(o.status == "completed" for o in outcomes), {o.status for o in outcomes}
    return cpu_seconds(pid) - cpu0


def until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise SystemExit(f"fan_in: {what} not within {timeout:g} s")


def event_time(client: Client, job_id: str, kind: str) -> int:
    return next(e.event.occurred_at for e in client.status(job_id).events if e.event.type == kind)


def fan_in(client: Client, pid: int, deps: int, gate_file: Path) -> tuple[float, float]:
    """(release latency in ms, engine CPU seconds) of one fan-in of ``deps`` dependencies."""
    cpu0 = cpu_seconds(pid)
    parts = scheduled_noops(client, deps - 1)
    gate = client.submit("gate", {"open_when": str(gate_file)}, tenant="t")
    dependent = client.submit("fan_in", {}, tenant="t", depends_on=[*parts, gate])
    until(lambda: list(client.status(dependent.job_id).dependencies.values()).count("pending") == 1, 600,
          "every no-op dependency reported")
    gate_file.touch()
    outcome = dependent.wait(600)
    assert outcome.status == "completed" and outcome.result == {"results": deps}, outcome
    cpu = cpu_seconds(pid) - cpu0
    latency_us = event_time(client, dependent.job_id, "JobStarted") - event_time(client, gate.job_id, "JobSucceeded")
    return latency_us / 1000, cpu


def one_run(bootstrap: str, deps: int, partitions: int) -> dict[str, float]:
    settings = fresh_settings(bootstrap, partitions)
    with engine_process(settings, "bench.apps:app") as proc, Client(settings) as client:
        base = baseline(client, proc.pid, deps)
        latency_ms, cpu = fan_in(client, proc.pid, deps, Path(settings.state_dir) / "gate")
    return {"latency_ms": latency_ms, "cpu_us_per_release": max(cpu - base, 0.0) / deps * 1e6,
            "baseline_us_per_job": base / deps * 1e6}


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deps", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    results = []
    with local_broker() as bootstrap:
        for n in range(args.runs):
            r = one_run(bootstrap, args.deps, args.partitions)
            results.append(r)
            print(f"run {n + 1}: last dependency's success -> dependent's start {r['latency_ms']:8.1f} ms, "
                  f"engine CPU {r['cpu_us_per_release']:6.0f} µs/release "
                  f"(a no-op job alone: {r['baseline_us_per_job']:.0f} µs)", flush=True)
    latencies = [r["latency_ms"] for r in results]
    print(f"{args.runs} runs of a fan-in of {args.deps} dependencies over {args.partitions} partitions: "
          f"release p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms; engine CPU "
          f"{median([r['cpu_us_per_release'] for r in results]):.0f} µs/release (median)")


if __name__ == "__main__":
    main()
