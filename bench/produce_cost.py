"""What ``ctx.produce`` costs the engine, per record and per job, and what jobs that do not use it pay.

Runs one engine process per run (transactions on, default settings) and measures its CPU time
(all threads, from /proc) between the first submit and the last completion, per job, for:

- ``noop``: a handler that produces nothing;
- ``emit x1`` / ``emit xN``: a handler that produces 1 / N records of ``--bytes`` bytes to a topic;
- with ``--baseline DIR`` also ``noop (baseline)``: the same no-op jobs on an engine run from DIR,
  a source tree without ``ctx.produce`` (e.g. ``git archive <commit> | tar -x -C DIR``): the A/B of
  what jobs that do not produce pay.

Variants are interleaved run by run, so a machine's load drifts over all of them alike.
``--micro`` times instead, in this process, what this change added to the path of every job, produce
or not: the tracing test around an attempt, and a success's outcome with no records.
Usage: python bench/produce_cost.py [--jobs 5000] [--runs 3] [--records 10] [--bytes 100] [--baseline DIR]
       python bench/produce_cost.py --micro
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import NewTopic

from bench.harness import ROOT, cpu_seconds, engine_process, follow_events, fresh_settings, local_broker, median
from engine.client import Client
from engine.contract import messages as m
from engine.runtime.topics import admin_for

PARTITIONS = 6


def one_run(bootstrap: str, jobs: int, records: int, size: int, root: Path) -> dict[str, float]:
    """``jobs`` jobs producing ``records`` records each (0: the no-op handler); the engine's CPU and time."""
    settings = fresh_settings(bootstrap, PARTITIONS)
    topic = f"out.{settings.namespace}"
    admin = admin_for(settings)
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    done: list[int] = []

    def until(event: m.Event) -> bool:
        if isinstance(event.body, m.JobSucceeded):
            done.append(event.occurred_at)
        return len(done) >= jobs

    task, payload = ("emit", {"topic": topic, "records": records, "bytes": size}) if records else ("noop", {})
    with engine_process(settings, "bench.apps:app", root=root) as proc:
        client = Client(settings)
        follower = threading.Thread(target=follow_events, args=(settings, PARTITIONS, until, 600))
        follower.start()
        cpu0, t0 = cpu_seconds(proc.pid), time.time()
        for chunk in range(0, jobs, 2000):
            client.submit_many([{"task_type": task, "payload": payload, "tenant": f"t{i % 10}"}
                                for i in range(chunk, min(jobs, chunk + 2000))])
        follower.join()
        cpu = cpu_seconds(proc.pid) - cpu0
        client.close()
    return {"cpu_us_per_job": cpu / jobs * 1e6, "jobs_per_s": jobs / (max(done) / 1e6 - t0)}


def baseline_tree(root: Path) -> Path:
    """``root``, with ``engine/schemas`` linked to its own ``schemas/``: in a source tree the package maps there, and
    the installed (editable) epochq would otherwise hand the baseline engine this tree's schemas."""
    link = root / "engine" / "schemas"
    if not link.exists():
        link.symlink_to(root / "schemas", target_is_directory=True)
    return root


def micro(n: int = 200_000) -> None:
    """Nanoseconds per job of what every attempt now does (no OpenTelemetry provider set, no records)."""
    import timeit

    from engine.runtime.execution.context import JobContext
    from engine.runtime.execution.verdicts import AttemptOutcome, AttemptOutcomeKind
    from engine.runtime.observe.tracing import tracing

    def best(fn: object) -> float:
        return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e9  # type: ignore[arg-type]

    def succeeded_before(result: bytes | None, duration_us: int) -> AttemptOutcome:  # .succeeded before the change
        return AttemptOutcome(AttemptOutcomeKind.SUCCEEDED, result=result, duration_us=duration_us)

    ctx = JobContext("j", "t", "noop", 1, 1, 0, None, 0.0)
    done = AttemptOutcome.succeeded(None, 5)
    print(f"per attempt, no OpenTelemetry provider set and no records: the tracing test {best(tracing):.0f} ns, "
          f"the records test {best(lambda: done.records and None) - best(lambda: None):.0f} ns, "
          f"a success's outcome {best(lambda: AttemptOutcome.succeeded(None, 5, ctx._records)):.0f} ns "
          f"(before: {best(lambda: succeeded_before(None, 5)):.0f} ns)")


def main() -> None:
    """Run the variants, interleaved, and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=10, help="records per job of the many-record variant")
    parser.add_argument("--bytes", type=int, default=100, help="bytes per record")
    parser.add_argument("--baseline", type=Path, default=None, help="a source tree without ctx.produce, for the A/B")
    parser.add_argument("--micro", action="store_true", help="time the per-job additions in this process only")
    args = parser.parse_args()
    if args.micro:
        micro()
        return
    variants: list[tuple[str, int, Path]] = [("noop", 0, ROOT), ("emit x1", 1, ROOT),
                                             (f"emit x{args.records}", args.records, ROOT)]
    if args.baseline is not None:
        variants.insert(0, ("noop (baseline)", 0, baseline_tree(args.baseline.resolve())))
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    with local_broker() as bootstrap:
        for n in range(args.runs):
            for name, records, root in variants:
                r = one_run(bootstrap, args.jobs, records, args.bytes, root)
                results[name].append(r)
                print(f"run {n + 1} {name:>16}: engine CPU {r['cpu_us_per_job']:6.0f} µs/job, "
                      f"{r['jobs_per_s']:6.0f} jobs/s", flush=True)
    cpu = {name: median([r["cpu_us_per_job"] for r in rs]) for name, rs in results.items()}
    print(f"median over {args.runs} runs of {args.jobs} jobs, {PARTITIONS} partitions, {args.bytes}-byte records:")
    for name in cpu:
        spread = [round(r["cpu_us_per_job"]) for r in results[name]]
        print(f"  {name:>16}: {cpu[name]:6.0f} µs/job  (runs: {spread})")
    one, many = cpu["emit x1"], cpu[f"emit x{args.records}"]
    print(f"  ctx.produce: {one - cpu['noop']:+.0f} µs for a job's first record, "
          f"{(many - one) / (args.records - 1):+.1f} µs per further record")
    if args.baseline is not None:
        print(f"  a job that produces nothing: {cpu['noop'] - cpu['noop (baseline)']:+.0f} µs/job against the baseline")


if __name__ == "__main__":
    main()
