"""Bulk submit from one process: ``Client.submit_many`` against the local broker.

Prints jobs/s per run (acknowledged by the broker, acks=all) and the median over runs, and
how much of each job's CPU time is the Avro encoding of its command (measured apart, same
kind of jobs). ``--without-codec`` replaces ``encode_command`` in the client by a constant
record, to measure everything else (what a faster codec leaves). No engine runs: this is the
client's side only (issue 12: ``submit_many`` >= 30,000 jobs/s).
Usage: python bench/submit_bench.py [--jobs 100000] [--batch 1000] [--runs 5] [--partitions 6] [--without-codec]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine.client
from bench.harness import fresh_settings, local_broker, median
from engine.client import Client
from engine.commands import new_command
from engine.contract import messages as m
from engine.contract.codec import encode_command


def jobs_of(count: int, start: int = 0) -> list[dict[str, object]]:
    """``count`` small jobs over 10 tenants, as an application would hand them to submit_many."""
    return [{"task_type": "noop", "payload": {"n": i}, "tenant": f"t{i % 10}"} for i in range(start, start + count)]


def one_run(client: Client, jobs: int, batch: int) -> tuple[float, float, float]:
    """Submit ``jobs`` in calls of ``batch``: jobs/s until the last call returned (all acknowledged),
    and CPU µs per job of the calling thread and of the whole process (librdkafka's threads too)."""
    chunks = [jobs_of(min(batch, jobs - n), n) for n in range(0, jobs, batch)]
    t0, thread0, process0 = time.perf_counter(), time.thread_time(), time.process_time()
    for chunk in chunks:
        client.submit_many(chunk)
    elapsed = time.perf_counter() - t0
    thread, process = time.thread_time() - thread0, time.process_time() - process0
    return jobs / elapsed, thread / jobs * 1e6, process / jobs * 1e6


def sample_commands(jobs: int) -> list[m.Command]:
    """SubmitJob commands like the ones ``jobs_of`` makes the client build."""
    return [new_command(f"job-{i}", f"t{i % 10}", m.SubmitJob("noop", m.Payload(b'{"n":%d}' % i)))
            for i in range(jobs)]


def codec_us_per_job(jobs: int) -> float:
    """CPU microseconds to Avro-encode one SubmitJob command (the codec's share of a submit)."""
    commands = sample_commands(jobs)
    t0 = time.thread_time()
    for command in commands:
        encode_command(command)
    return (time.thread_time() - t0) / jobs * 1e6


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="jobs per submit_many call")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--without-codec", action="store_true", help="a constant record instead of encode_command")
    args = parser.parse_args()
    if args.without_codec:
        record = encode_command(sample_commands(1)[0])
        engine.client.encode_command = lambda command: record  # type: ignore[assignment]
        print("encode_command replaced by a constant record: the figures are everything but the codec")
    with local_broker() as bootstrap:
        settings = fresh_settings(bootstrap, args.partitions)
        with Client(settings) as client:
            one_run(client, min(args.jobs, 5000), args.batch)  # warm-up: connections, metadata
            runs = []
            for n in range(args.runs):
                runs.append(one_run(client, args.jobs, args.batch))
                rate, thread, process = runs[-1]
                print(f"run {n + 1}: {args.jobs} jobs in calls of {args.batch}: {rate:,.0f} jobs/s; CPU per job "
                      f"{thread:.1f} µs in the calling thread, {process:.1f} µs in the process")
    rate, thread = median([r[0] for r in runs]), median([r[1] for r in runs])
    print(f"median of {args.runs} runs: {rate:,.0f} jobs/s = {1e6 / rate:.1f} µs per job; calling thread's CPU "
          f"{thread:.1f} µs per job")
    codec = codec_us_per_job(20_000)
    share = "not in these runs" if args.without_codec else f"{codec / thread:.0%} of the calling thread's CPU"
    print(f"codec (encode_command of one such SubmitJob): {codec:.1f} µs of CPU per job, {share}")


if __name__ == "__main__":
    main()
