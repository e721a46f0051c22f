"""epochq and BullMQ side by side on this machine: bulk submit, end-to-end drain, delayed-job lateness.

Each run measures every figure for both peers, alternating which goes first, and prints the
machine's load average; the end prints medians over runs and the ratios epochq/BullMQ.
epochq runs with `epochq engine run bench.apps:app` and no tuning flags (6 partitions, the
`epochq topics ensure` default) on the local broker; BullMQ (bench/peers/bullmq.mjs) on a
redis-server started here on a free loopback port without persistence. docs/benchmarks.md says
what each figure means. `make bench-peers` installs what this needs and runs it.

Usage: python bench/peers/compare.py [--runs 3] [--jobs 20000] [--delayed 5000] [--span 5] [--lead 20]
                                     [--engine-args='--concurrency 256' ...]
(--engine-args adds a drain row for epochq with those engine flags; write it with '=', since the
value starts with '--'. A row whose flag this engine does not have is skipped with a note.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import ROOT, local_broker, median, percentile
from bench.peers import epochq_side
from bench.peers.redis_server import redis_server

HERE = Path(__file__).resolve().parent
NODE_TIMEOUT_S = 900


class Figures:
    """Every measured value, by row and peer, one per run."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], list[float]] = {}
        self.loads: list[str] = []  # per run: load average at its start → at its end

    def add(self, row: str, peer: str, value: float) -> None:
        self.values.setdefault((row, peer), []).append(value)

    def get(self, row: str, peer: str) -> list[float]:
        return self.values.get((row, peer), [])


def bullmq(figure: str, port: int, **options: float) -> dict[str, Any]:
    """One figure from bench/peers/bullmq.mjs, as the JSON object it prints."""
    cmd = ["node", str(HERE / "bullmq.mjs"), figure, "--port", str(port)]
    cmd += [f"--{name}={value}" for name, value in options.items()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bullmq.mjs {figure} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def engine_has_flags(variants: list[list[str]]) -> list[list[str]]:
    """The engine-flag variants whose flags `epochq engine run` knows; prints a note for the others."""
    usage = subprocess.run([sys.executable, "-m", "engine.cli.main", "engine", "run", "--help"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    known = []
    for flags in variants:
        names = [f.split("=")[0] for f in flags if f.startswith("--")]
        missing = [name for name in names if not re.search(rf"{re.escape(name)}\b", usage)]
        if missing:
            print(f"skipped drain row `{' '.join(flags)}`: `epochq engine run` has no {', '.join(missing)} here")
        else:
            known.append(flags)
    return known


def drain_row(flags: list[str]) -> str:
    """The name of epochq's drain row run with these engine flags."""
    return f"drain, {' '.join(flags)}" if flags else "drain, default settings"


def report(row: str, peer: str, text: str) -> None:
    """One measured figure, printed as soon as it is known."""
    print(f"  {row:28} {peer:7} {text}", flush=True)


def measure_submit(args: argparse.Namespace, bootstrap: str, port: int, figures: Figures, order: list[str]) -> None:
    """Jobs/s of bulk submission with no consumer: submit_many against addBulk."""
    for peer in order:
        if peer == "epochq":
            rate = epochq_side.submit(bootstrap, args.jobs, args.epochq_batch)
        else:
            rate = bullmq("submit", port, jobs=args.jobs, batch=args.bullmq_batch)["jobs_per_s"]
        figures.add("bulk submit", peer, rate)
        report("bulk submit", peer, f"{rate:9,.0f} jobs/s")


def measure_drain(args: argparse.Namespace, bootstrap: str, port: int, figures: Figures, order: list[str]) -> None:
    """Jobs/s from first submit to last completion; epochq once per engine-flag variant."""
    for peer in order:
        if peer == "BullMQ":
            result = bullmq("drain", port, jobs=args.jobs, batch=args.bullmq_batch, concurrency=args.concurrency)
            for flags in args.variants:  # the denominator of every epochq drain row
                figures.add(drain_row(flags), peer, result["jobs_per_s"])
            rows = [("drain", result)]
        else:
            rows = [(drain_row(flags), epochq_side.drain(bootstrap, args.jobs, args.epochq_batch, flags))
                    for flags in args.variants]
            for row, result in rows:
                figures.add(row, peer, result["jobs_per_s"])
        for row, result in rows:
            report(row, peer, f"{result['jobs_per_s']:9,.0f} jobs/s  ({result['elapsed_s']:.1f} s)")


def measure_lateness(args: argparse.Namespace, bootstrap: str, port: int, figures: Figures, order: list[str]) -> None:
    """Start minus due time of delayed jobs, p50 and p99 (ms)."""
    for peer in order:
        if peer == "epochq":
            result = epochq_side.lateness(bootstrap, args.delayed, args.epochq_batch, args.span, args.lead)
        else:
            result = bullmq("lateness", port, jobs=args.delayed, batch=args.bullmq_batch,
                            concurrency=args.concurrency, span=args.span, lead=args.lead)
        p50, p99 = (percentile(result["lateness_ms"], q) for q in (50, 99))
        figures.add("lateness p50 (ms)", peer, p50)
        figures.add("lateness p99 (ms)", peer, p99)
        report("delayed-job lateness", peer, f"p50 {p50:8.1f} ms  p99 {p99:8.1f} ms  (all accepted "
               f"{result['accepted_before_due_s']:.1f} s before the first was due)")


MEASUREMENTS = (measure_submit, measure_drain, measure_lateness)


def one_run(n: int, args: argparse.Namespace, bootstrap: str, port: int, figures: Figures) -> None:
    """Every figure once for both peers; who goes first alternates by run and by figure."""
    print(f"run {n + 1} of {args.runs}  (load average {loadavg()} at its start)", flush=True)
    figures.loads.append(loadavg())
    for k, measure in enumerate(MEASUREMENTS):
        order = ["epochq", "BullMQ"] if (n + k) % 2 == 0 else ["BullMQ", "epochq"]
        measure(args, bootstrap, port, figures, order)
    figures.loads[-1] += f" → {loadavg()}"
    print(f"  load average {loadavg()} at the end of run {n + 1}", flush=True)


def loadavg() -> str:
    """The machine's load average over 1, 5 and 15 minutes (it is shared: read figures against it)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_summary(args: argparse.Namespace, figures: Figures) -> None:
    """Medians over runs per row, and epochq/BullMQ per run and of the medians (rates only)."""
    print(f"\nmedians over {args.runs} run(s): {args.jobs:,} jobs (epochq submit_many of {args.epochq_batch:,}, "
          f"BullMQ addBulk of {args.bullmq_batch:,}, worker concurrency {args.concurrency}); "
          f"{args.delayed:,} delayed jobs due over {args.span:g} s, {args.lead:g} s ahead")
    print(f"{'figure':34} {'epochq':>10} {'BullMQ':>10} {'epochq/BullMQ':>14}   per run")
    rows = ["bulk submit", *map(drain_row, args.variants), "lateness p50 (ms)", "lateness p99 (ms)"]
    for row in rows:
        ours, theirs = figures.get(row, "epochq"), figures.get(row, "BullMQ")
        if not ours or not theirs:
            continue
        cells = f"{row:34} {median(ours):10,.1f} {median(theirs):10,.1f}"
        if "lateness" in row:
            print(f"{cells} {'':>14}   epochq {fmt(ours)}; BullMQ {fmt(theirs)}")
        else:
            ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
            print(f"{cells} {median(ours) / median(theirs):13.3f}×   {fmt(ratios, '.3f')} (jobs/s: epochq "
                  f"{fmt(ours, ',.0f')}; BullMQ {fmt(theirs, ',.0f')})")
    print(f"load average (1/5/15 min) at each run's start → end: {'; '.join(figures.loads)}")


def fmt(values: list[float], spec: str = ".1f") -> str:
    """The values of each run, space-separated."""
    return " ".join(format(v, spec) for v in values)


def parse_args() -> argparse.Namespace:
    """The command line; ``variants`` holds the engine flags of each epochq drain row ([] = defaults)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs for bulk submit and for drain")
    parser.add_argument("--delayed", type=int, default=5000, help="delayed jobs for lateness")
    parser.add_argument("--span", type=float, default=5.0, help="seconds over which the delayed jobs come due")
    parser.add_argument("--lead", type=float, default=20.0, help="seconds from submission to the first due time")
    parser.add_argument("--epochq-batch", type=int, default=1000, help="jobs per Client.submit_many call")
    parser.add_argument("--bullmq-batch", type=int, default=100, help="jobs per Queue.addBulk call")
    parser.add_argument("--concurrency", type=int, default=100, help="BullMQ worker concurrency")
    parser.add_argument("--engine-args", action="append", default=[], metavar="FLAGS",
                        help="another epochq drain row with these engine flags, e.g. --engine-args='--processes 2'")
    args = parser.parse_args()
    args.variants = engine_has_flags([[], *map(shlex.split, args.engine_args)])
    return args


def main() -> None:
    """Run the comparison and print the figures."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the servers started here are stopped
    args = parse_args()
    if not (HERE / "node_modules" / "bullmq").is_dir():
        sys.exit("bench/peers/node_modules is missing: run `make bench-peers` (or `npm ci` in bench/peers)")
    started = time.monotonic()
    figures = Figures()
    with local_broker() as bootstrap, redis_server() as port:
        epochq_side.warm_up(bootstrap)
        for n in range(args.runs):
            one_run(n, args, bootstrap, port, figures)
    print_summary(args, figures)
    print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
