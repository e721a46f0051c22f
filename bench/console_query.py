"""The console's two reads at ten million jobs: a job page and a filtered list page, p50/p99.

Builds (once; ``--keep`` keeps it for the next run, and an interrupted build goes on from each
store's applied offset) a state directory whose view stores (``<state>/<ns>/view/pNNNN``, where
``epochq view run`` keeps them and the console reads them) hold ``--jobs`` jobs, by folding
synthesized events straight into them as the view does (``projections.restore.Restorer``, the full
fold, with the view's retention, ``--keep-finished`` 30 days, after each event; committed every
4,000 events): no Kafka. Jobs are spread over ``--partitions`` stores (job n in store n mod P), 200
tenants (skewed: a few large, many small), 20 task types, submitted evenly over 30 days, and end
as completed 86 %, scheduled 5 %, queued 4 %, dead 2 %, retrying 2 %, cancelled 1 %, and 600
running (1 % of the newest 60,000: handler slots bound them); every third job has a ``team``
label (5 values). ``--procs`` processes build partitions side by side.

Then it times, over ``--queries`` random requests each:

- **job page**: ``engine.questions.jobs.job_detail``, the job's record (status, attempts, due time,
  errors) and its history offsets from the history index, through the process's kept store
  readers (``engine.questions.readers``: RocksDB secondaries caught up on each use), as a console does;
  and, for a fifth as many jobs, the same through a store opened read-only for the request, as a
  one-shot ``epochq status``/``history`` process does;
- **list page**: ``engine.questions.jobs.list_jobs`` with 50 rows and counts per status, for a mix of
  filters (status; tenant; tenant × status; task type × status; tenant × task type × status; a
  label; a 1-day window; the second page of one of them by cursor), through the kept readers.

Usage: python bench/console_query.py [--jobs 10000000] [--partitions 6] [--procs 2] [--queries 300]
       [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import percentile
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.contract.codec import encode_event
from engine.questions.jobs import STATUSES, JobFilter, job_detail, list_jobs
from engine.questions.stores import indexed_history, read_store
from projections.restore import Restorer
from projections.retention import DAY_US as RETENTION_DAY_US
from projections.retention import Retention
from projections.store import open_store, view_store_path
from projections.views.jobs import read_job

DAY_US = 86_400_000_000
START_US = 1_780_000_000_000_000
SPAN_US = 30 * DAY_US
PAYLOAD = m.Payload(b'{"to": "someone@example.com", "template": "welcome"}')
ENDS = (("completed", 85), ("scheduled", 5), ("queued", 4), ("dead", 2), ("retrying", 2), ("running", 1),
        ("cancelled", 1))
_END_OF = [end for end, share in ENDS for _ in range(share)]
TENANTS = [f"tenant-{i:03d}" for i in range(200)]
TYPES = [f"task.{i:02d}" for i in range(20)]
TEAMS = ["red", "blue", "green", "ops", "data"]
COMMIT_EVERY = 4000
RUNNING_AMONG_NEWEST = 60_000
"""Only jobs among the newest this many are still running (1 % of them: 600), as handler slots bound them."""


def job_id(n: int) -> str:
    """The id of job ``n``."""
    return f"j{n:011d}"


def tenant_of(n: int) -> str:
    """Skewed: tenant i gets about 1/(i+1) of the jobs (a few large tenants, many small)."""
    r = (n * 2654435761) % 1_000_003 / 1_000_003
    return TENANTS[min(len(TENANTS) - 1, int(len(TENANTS) ** r) - 1)]


def job_events(n: int, jobs: int) -> list[m.Event]:
    """The events of job ``n`` (submitted ``n`` steps into the 30 days), up to its end."""
    jid, tenant, task = job_id(n), tenant_of(n), TYPES[(n * 7) % len(TYPES)]
    at = START_US + n * SPAN_US // jobs
    end = _END_OF[(n * 31) % 100]
    if end == "running" and n < jobs - RUNNING_AMONG_NEWEST:
        end = "completed"  # an engine runs as many jobs at once as it has slots, not 1 % of all it ever held
    labels = {"team": TEAMS[(n // 3) % len(TEAMS)]} if n % 3 == 0 else {}
    seq = iter(range(8))

    def ev(body: m.EventBody) -> m.Event:
        return m.Event(f"{jid}-{next(seq)}", jid, tenant, 1, "bench", at, body)

    run_at = at + DAY_US if end == "scheduled" else None
    out = [ev(m.JobSubmitted(task, PAYLOAD, 5, "normal", 3, run_at, labels=labels))]
    if end == "scheduled":
        return out + [ev(m.JobScheduled(run_at))]  # type: ignore[arg-type]
    out.append(ev(m.JobQueued("submitted")))
    if end in ("queued", "cancelled"):
        return out + ([ev(m.JobCancelled("not needed"))] if end == "cancelled" else [])
    out.append(ev(m.JobStarted(1, at, "bench")))
    if end == "completed":
        return out + [ev(m.JobSucceeded(1, 150, b'{"ok": true}'))]
    if end == "running":
        return out
    out.append(ev(m.JobFailed(1, "ConnectionError", "downstream unavailable", 900)))
    return out + [ev(m.JobDeadLettered("attempts exhausted", 1) if end == "dead" else m.JobRetryScheduled(2, at + 60))]


def build_partition(args: tuple[str, str, int, int, int]) -> tuple[int, int, float]:
    """Fold partition ``p``'s share of the jobs into its view store, as the view folds; (partition, events, s)."""
    state_dir, namespace, p, partitions, jobs = args
    store = open_store(view_store_path(Path(state_dir), namespace, p))
    restorer = Restorer(store, "bench.events", p, commit_every=COMMIT_EVERY)
    retention = Retention(30 * RETENTION_DAY_US)  # `view run`'s default --keep-finished
    restorer.on_folded = lambda event, folded: retention.after(restorer.batch, event, folded)
    t0, first = time.monotonic(), restorer.next_offset  # an interrupted build goes on from there

    def records() -> Iterator[tuple[int, bytes]]:
        yield 0, encode_event(m.Event("claim", None, None, 1, "bench", START_US, m.OwnershipClaimed(p, "bench")))
        offset = 0
        for n in range(p, jobs, partitions):
            for event in job_events(n, jobs):
                offset += 1
                if offset >= first:
                    yield offset, encode_event(event)

    restorer.feed(records())
    restorer.finish()
    folded = restorer.next_offset
    store.close()
    return p, folded, time.monotonic() - t0


def build(settings: Settings, partitions: int, jobs: int, procs: int) -> None:
    """Every partition's store, ``procs`` at a time; prints the rate."""
    t0 = time.monotonic()
    work = [(str(settings.state_dir), settings.namespace, p, partitions, jobs) for p in range(partitions)]
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        for p, events, seconds in pool.imap_unordered(build_partition, work):
            print(f"  partition {p}: {events:,} events folded in {seconds:.0f} s "
                  f"({events / seconds:,.0f} events/s)", flush=True)
    size = sum(f.stat().st_size for f in Path(settings.state_dir).rglob("*") if f.is_file())
    print(f"built {jobs:,} jobs in {time.monotonic() - t0:.0f} s; stores on disk: {size / 1e9:.2f} GB", flush=True)


def job_page(settings: Settings, n: int) -> tuple[str, int]:
    """What a job page reads (``engine.questions.jobs.job_detail``): the record and its history offsets, through
    the process's store readers, asking each store (no partition given, as a page for a bare job id does)."""
    detail = job_detail(settings, job_id(n))
    assert detail is not None and detail.history, n
    return detail.row.status, len(detail.history)


def cold_job_page(settings: Settings, partitions: int, n: int) -> tuple[str, int]:
    """The same from a fresh process's point of view (``epochq status``/``history``): its store opened
    read-only for the request, the history from the history index."""
    jid, p = job_id(n), n % partitions
    with read_store(view_store_path(Path(settings.state_dir), settings.namespace, p)) as store:
        job = read_job(store, jid)
    history = indexed_history(settings, p, jid)
    assert job is not None and history is not None and history.entries, jid
    return job.state.value, len(history.entries)


def random_filter(rng: random.Random) -> tuple[str, JobFilter]:
    """One of the list pages a console asks for."""
    tenant, task, status = rng.choice(TENANTS[:60]), rng.choice(TYPES), rng.choice(STATUSES)
    day = START_US + rng.randrange(29) * DAY_US
    kinds: list[tuple[str, JobFilter]] = [
        ("status", JobFilter(status=status)), ("tenant", JobFilter(tenant=tenant)),
        ("tenant x status", JobFilter(status=status, tenant=tenant)),
        ("type x status", JobFilter(status=status, task_type=task)),
        ("tenant x type x status", JobFilter(status=status, tenant=tenant, task_type=task)),
        ("label", JobFilter(labels=(("team", rng.choice(TEAMS)),))),
        ("1-day window", JobFilter(since_us=day, until_us=day + DAY_US)),
    ]
    return rng.choice(kinds)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def query(settings: Settings, partitions: int, jobs: int, queries: int) -> None:
    """Time job pages and list pages; print p50/p99 per kind and overall."""
    rng = random.Random(7)
    t0 = time.perf_counter()
    job_page(settings, 0)
    print(f"first request (opens every store as a kept reader): {(time.perf_counter() - t0) * 1000:.0f} ms")
    pages = [timed(lambda: job_page(settings, rng.randrange(jobs)))[0] for _ in range(queries)]
    print(f"job page ({queries} random jobs): p50 {percentile(pages, 50):.1f} ms, p99 {percentile(pages, 99):.1f} ms")
    cold = [timed(lambda: cold_job_page(settings, partitions, rng.randrange(jobs)))[0] for _ in range(queries // 5)]
    print(f"job page, store opened read-only per request ({len(cold)} jobs): p50 {percentile(cold, 50):.1f} ms, "
          f"p99 {percentile(cold, 99):.1f} ms")
    by_kind: dict[str, list[float]] = {}
    for _ in range(queries):
        kind, flt = random_filter(rng)
        ms, page = timed(functools.partial(list_jobs, settings, flt, limit=50))
        by_kind.setdefault(kind, []).append(ms)
        cursor = page.next_cursor  # type: ignore[attr-defined]
        if cursor and rng.random() < 0.3:
            again = functools.partial(list_jobs, settings, flt, cursor=cursor, limit=50)
            by_kind.setdefault("next page (cursor)", []).append(timed(again)[0])
    for kind, figures in by_kind.items():
        print(f"  list page, {kind:24} n={len(figures):3}: p50 {percentile(figures, 50):6.1f} ms, "
              f"p99 {percentile(figures, 99):6.1f} ms")
    every = [ms for figures in by_kind.values() for ms in figures]
    print(f"list page (all {len(every)}): p50 {percentile(every, 50):.1f} ms, p99 {percentile(every, 99):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dir", help="state directory to build in, or reuse (default: a fresh temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the state directory afterwards")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="console-query-"))
    settings = load_settings(state_dir=str(root), bootstrap="127.0.0.1:9")
    marker = root / f"built-{args.jobs}-{args.partitions}"
    try:
        if not marker.exists():
            print(f"building {args.jobs:,} jobs in {root} ({args.partitions} partitions, {args.procs} processes)")
            build(settings, args.partitions, args.jobs, args.procs)
            marker.touch()
        if args.queries:
            query(settings, args.partitions, args.jobs, args.queries)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
