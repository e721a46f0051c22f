"""``epochq queues`` and ``epochq breakers``: the scheduling policy, read from the projections."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.cli.fresh import say_freshness
from engine.questions.stores import breaker_report, queue_report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``queues`` and ``breakers``."""
    queues = sub.add_parser("queues", help="queue depth per lane and tenant, and each tenant's served share")
    queues.add_argument("--json", action="store_true")
    add_connection_flags(queues)
    queues.set_defaults(func=_queues)
    breakers = sub.add_parser("breakers", help="circuit breaker of each task type")
    breakers.add_argument("--json", action="store_true")
    add_connection_flags(breakers)
    breakers.set_defaults(func=_breakers)


def _queues(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    report = queue_report(settings)
    say_freshness(settings)
    if args.json:
        print_json(report)
        return 0
    for lane, info in report.items():
        print(f"{lane:7} queued {info['queued']}")
        for tenant, t in info["tenants"].items():
            print(f"   {tenant:20} queued {t['queued']:>8}  served {t['served']:>9}  share {t['share']:.3f}")
    return 0


def _breakers(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    records = breaker_report(settings)
    say_freshness(settings)
    if args.json:
        print_json([{"task_type": r.task_type, "status": r.status.value, "since_us": r.since,
                     "reopen_at_us": r.reopen_at, "reason": r.reason} for r in records])
        return 0
    if not records:
        print("no breaker has ever opened")
    for r in records:
        reopen = f", probe after {_iso(r.reopen_at)}" if r.reopen_at and r.status.value == "open" else ""
        print(f"{r.task_type:24} {r.status.value:9} since {_iso(r.since)}{reopen}  {r.reason}")
    return 0


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
