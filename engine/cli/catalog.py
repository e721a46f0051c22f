"""``epochq jobs list`` and ``epochq workers``: the catalog of jobs and the engines at work."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any

from engine.cli.common import add_connection_flags, print_json, since_us, settings_from
from engine.cli.fresh import say_freshness
from engine.cli.hints import no_match
from engine.config import Settings
from engine.errors import ValidationError
from engine.questions.workers import WorkerRow, list_workers
from engine.questions.view_status import await_view
from engine.questions.jobs import STATUSES, JobFilter, JobPage, JobRow, list_jobs
from engine.questions.rejected import list_rejected


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``jobs list`` and ``workers``."""
    jobs = sub.add_parser("jobs", help="list jobs by status, tenant, task type, time and label")
    verbs = jobs.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="one page of jobs, newest first, with counts per status")
    listing.add_argument("--status", choices=(*STATUSES, "rejected"),
                         help="rejected: submits the engines refused (they made no job; kept by the view)")
    listing.add_argument("--tenant")
    listing.add_argument("--type", dest="task_type", help="task type")
    listing.add_argument("--since", help="submitted at or after: 15m, 2h, 1d (that long ago) or ISO-8601 "
                                              "(UTC if no zone)")
    listing.add_argument("--until", help="submitted before: 15m, 2h, 1d ago or ISO-8601")
    listing.add_argument("--label", action="append", default=[], metavar="K=V",
                         help="repeat for several (all must match)")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--cursor", help="the next-cursor of the previous page")
    listing.add_argument("--json", action="store_true")
    add_connection_flags(listing)
    listing.set_defaults(func=_list)
    workers = sub.add_parser("workers", help="engine instances and remote workers: partitions, pools, slots, running "
                                             "jobs")
    workers.add_argument("--json", action="store_true")
    add_connection_flags(workers)
    workers.set_defaults(func=_workers)


def parse_labels(items: list[str]) -> tuple[tuple[str, str], ...]:
    """``k=v`` flags as sorted pairs; ValidationError for one without ``=``."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError(f"label: {item!r} is not k=v", "labels")
        pairs.append((key, value))
    return tuple(sorted(pairs))


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    rejected = args.status == "rejected"
    flt = JobFilter(None if rejected else args.status, args.tenant, args.task_type, since_us(args.since, "--since"),
                    since_us(args.until, "--until"), parse_labels(args.label))
    await_view(settings)
    listed = list_rejected if rejected else list_jobs
    result = listed(settings, flt, cursor=args.cursor, limit=args.limit)
    say_freshness(settings)
    if args.json:
        print_json(page_json(result))
        return 0
    shown = ("rejected",) if rejected else STATUSES
    print("  ".join(f"{s} {result.counts.get(s, 0)}{'' if result.counts_exact else '+'}" for s in shown))
    print(f"{'submitted (UTC)':24} {'status':10} {'tenant':16} {'task type':20} {'att':>3} {'p':>1}  job")
    for row in result.rows:
        print(f"{_iso(row.submitted_at_us):24} {row.status:10} {row.tenant[:16]:16} {row.task_type[:20]:20} "
              f"{row.attempts:>3} {row.priority:>1}  {row.job_id}{'  ' + row.error if row.error else ''}")
    print(f"next-cursor: {result.next_cursor}" if result.next_cursor else "next-cursor: none (last page)")
    if not result.rows and not args.cursor and not rejected:
        say_unmatched(settings, args.tenant, args.task_type)
    return 0


def say_unmatched(settings: Settings, tenant: str | None, task_type: str | None) -> None:
    """On stderr: a ``--tenant`` or ``--type`` the catalog has never counted, with the names it has."""
    from engine.questions.lookup import task_type_counts, tenant_counts

    for flag, given, seen in (("--tenant", tenant, tenant_counts), ("--type", task_type, task_type_counts)):
        names = seen(settings) if given else {}
        if given and given not in names:
            kind = "tenant" if flag == "--tenant" else "task type"
            print(f"epochq: {no_match('job', flag, given, names, kind)}", file=sys.stderr)


def page_json(result: JobPage) -> dict[str, Any]:
    """The stable JSON form of a page (documented in docs/cli.md)."""
    return {"rows": [row_json(r) for r in result.rows], "counts": result.counts, "counts_exact": result.counts_exact,
            "next_cursor": result.next_cursor, "partitions": result.partitions}


def row_json(row: JobRow) -> dict[str, Any]:
    """The stable JSON form of one listed job."""
    return {"job_id": row.job_id, "tenant": row.tenant, "task_type": row.task_type, "status": row.status,
            "priority": row.priority, "lane": row.lane, "attempts": row.attempts,
            "submitted_us": row.submitted_at_us, "submitted": _iso(row.submitted_at_us),
            "due_us": row.due_at_us, "updated_us": row.updated_at_us, "partition": row.partition, "error": row.error}


def _workers(args: argparse.Namespace) -> int:
    rows = list_workers(settings_from(args))
    if args.json:
        print_json([worker_json(r) for r in rows])
        return 0
    if not rows:
        print("no engine instance has published a heartbeat (none running, or none since `topics ensure`)")
    now = time.time()
    for row in rows:
        age = now - row.seen_at_us / 1e6
        state = "LOST" if row.lost else "alive"
        kind = f"worker of pool {row.pool}" if row.pool is not None else "engine"
        print(f"{row.instance} ({kind}) on {row.host} pid {row.pid}: {state}, seen {age:.1f} s ago, "
              f"up since {_iso(row.started_at_us)}")
        for p in row.partitions:
            print(f"  partition {p.partition:>3}  epoch {p.epoch:>4}  {p.phase}")
        if decides_only(row):
            print("  slots: none here (it decides only: every task type it handles goes to a pool)")
        else:
            print("  slots: " + ", ".join(f"{s.lane} {s.used}/{s.used + s.free}" for s in row.slots))
        if row.task_types is not None:
            print(f"  task types: {' '.join(row.task_types) or '(none)'}")
        if row.pools:
            print("  sent to pools: " + ", ".join(f"{t} -> {p}" for t, p in sorted(row.pools.items())))
        print(f"  running ({len(row.running)}): {' '.join(row.running[:20])}{' ...' if len(row.running) > 20 else ''}")
    return 0


def decides_only(row: WorkerRow) -> bool:
    """Whether ``row`` is an engine that runs no task type itself (``engine run --no-execute``, or every task a
    pool's): its lanes' slots are never used, so they are not shown."""
    return row.pool is None and bool(row.task_types) and all(t in row.pools for t in row.task_types or ())


def worker_json(row: WorkerRow) -> dict[str, Any]:
    """The stable JSON form of one engine instance."""
    return {"instance": row.instance, "host": row.host, "pid": row.pid, "started_us": row.started_at_us,
            "seen_us": row.seen_at_us, "interval_s": row.interval_s, "lost": row.lost,
            "partitions": [{"partition": p.partition, "epoch": p.epoch, "phase": p.phase, "owner": p.owner}
                           for p in row.partitions],
            "slots": [{"lane": s.lane, "used": s.used, "free": s.free} for s in row.slots], "running": row.running,
            "task_types": row.task_types, "pool": row.pool, "pools": row.pools}


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
