"""The fold's cost per job: synthesized events folded into a fresh store, as an owner folds what it decides.

Each job is JobSubmitted, JobQueued, JobStarted, JobSucceeded (a no-op job's four events), folded
through a ``Batch`` with ``projections.evolve.fold`` and committed every ``--tick`` events (an
engine commits once per tick), 100 tenants and 10 task types. Prints CPU µs per job per run and
the median. It uses only what main has as well, so the same file measures main's fold
(``PYTHONPATH=<a checkout of main> python bench/fold_cost.py``).

``--profile full|write_model`` picks the fold's profile (projections/profile.py; an engine's
owner folds ``write_model``, the default here); a checkout without profiles folds its one fold.

Usage: python bench/fold_cost.py [--jobs 50000] [--runs 3] [--tick 400] [--backlog] [--profile full]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: main's checkout can go first

from engine.contract import messages as m
from projections.batch import Batch
from projections.evolve import fold
from projections.store import open_store

try:
    from projections.profile import FULL, WRITE_MODEL
    PROFILES: dict[str, object] = {"full": FULL, "write_model": WRITE_MODEL}
except ImportError:  # a checkout from before the write model: one fold, the full one
    PROFILES = {}

PAYLOAD = m.Payload(b'{"to": "someone@example.com", "template": "welcome"}')


def noop_job(n: int, now: int) -> list[m.Event]:
    """The four events of a no-op job that completed."""
    job_id, tenant, task = f"job-{n:09d}", f"tenant-{n % 100}", f"task.{n % 10}"

    def event(body: m.EventBody, i: int) -> m.Event:
        return m.Event(f"0-1-{n * 4 + i}", job_id, tenant, 1, "bench-owner", now + n * 10 + i, body)

    return [event(m.JobSubmitted(task, PAYLOAD, 5, "normal", 3), 0), event(m.JobQueued("submitted"), 1),
            event(m.JobStarted(1, now + n, "bench-owner"), 2), event(m.JobSucceeded(1, 150, b"null"), 3)]


def one_run(jobs: int, tick: int, backlog: bool = False, profile: str = "write_model") -> float:
    """CPU µs per job folding ``jobs`` no-op jobs into a fresh store; ``backlog``: every job submitted
    and queued first, then every start, then every success (each job's changes in three batches, as
    in an engine working through a backlog) instead of each job's four events in a row."""
    root = Path(tempfile.mkdtemp(prefix="fold-cost-"))
    try:
        store = open_store(root / "p0000")
        batch = Batch(store, profile=PROFILES[profile]) if PROFILES else Batch(store)  # type: ignore[call-arg]
        claim = m.Event("claim", None, None, 1, "bench-owner", 1, m.OwnershipClaimed(0, "bench-owner"))
        fold(batch, claim, 0)
        per_job = [noop_job(n, 1_700_000_000_000_000) for n in range(jobs)]
        if backlog:
            events = [e for j in per_job for e in j[:2]] + [j[2] for j in per_job] + [j[3] for j in per_job]
        else:
            events = [e for j in per_job for e in j]
        cpu0 = time.process_time()
        for offset, event in enumerate(events, start=1):
            fold(batch, event, offset)
            if offset % tick == 0:
                batch.commit()
        batch.commit()
        cpu = time.process_time() - cpu0
        store.close()
        return cpu / jobs * 1e6
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tick", type=int, default=400)
    parser.add_argument("--backlog", action="store_true", help="submits, then starts, then successes")
    parser.add_argument("--profile", choices=["full", "write_model"], default="write_model")
    args = parser.parse_args()
    figures = []
    for run in range(args.runs):
        figures.append(one_run(args.jobs, args.tick, args.backlog, args.profile))
        print(f"run {run + 1}: {figures[-1]:.1f} CPU µs per job (4 events)", flush=True)
    print(f"median: {statistics.median(figures):.1f} CPU µs per job")


if __name__ == "__main__":
    main()
