"""``epochq limits set|clear|list`` (per-task-type rate limits) and ``epochq reprioritize JOB N``."""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from collections.abc import Iterable
from typing import Any

from engine.cli.common import (
    EXIT_NEGATIVE, EXIT_NOT_DONE, add_connection_flags, print_json, refused, settings_from,
)
from engine.cli.control import tenant_of_job
from engine.cli.fresh import say_freshness
from engine.cli.tasktypes import add_force_flag, check_task_type
from engine.client import Client, Outcome
from engine.contract import messages as m
from engine.domain.lanes import parse_priority
from engine.domain.ratelimits import check_burst, parse_rate, shown_rate
from engine.errors import ValidationError
from engine.questions.tally import Tally, tally
from engine.schedule_client import Receipt
from projections.views.ratelimits import LimitRecord


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``limits`` (set, clear, list) and ``reprioritize``."""
    limits = sub.add_parser("limits", help="per-task-type rate limits: how fast jobs of a type start")
    verbs = limits.add_subparsers(dest="verb", required=True, metavar="VERB")
    one = verbs.add_parser("set", help="start jobs of a task type at most N a second (queued ones wait their turn)")
    one.add_argument("task_type")
    one.add_argument("--rate", required=True, help="N/s, N/m, N/h or N/d across all partitions, e.g. 10/s")
    one.add_argument("--burst", type=int, default=1, help="starts allowed at once across all partitions (default 1)")
    add_force_flag(one)
    clear = verbs.add_parser("clear", help="remove a task type's rate limit")
    clear.add_argument("task_type")
    for parser in (one, clear):
        parser.add_argument("--reason", default="", help="why (recorded in the event)")
        parser.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
        parser.add_argument("--wait", type=float, default=10.0, help="seconds to wait for every partition's decision")
        add_connection_flags(parser)
    one.set_defaults(func=_set)
    clear.set_defaults(func=_clear)
    listing = verbs.add_parser("list", help="the rate limits in the projections of the state directory")
    listing.add_argument("--json", action="store_true")
    add_connection_flags(listing)
    listing.set_defaults(func=_list)
    _register_reprioritize(sub)


def _register_reprioritize(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("reprioritize", help="give a waiting job another priority (it moves in its queue)")
    parser.add_argument("job_id")
    parser.add_argument("priority", help="0-9 (9 highest) or critical, high, normal, low")
    parser.add_argument("--tenant", default="", help="the job's tenant (default: read from the job's history)")
    parser.add_argument("--reason", default="", help="why (recorded in the event)")
    parser.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
    parser.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the decision (0: don't)")
    parser.add_argument("--json", action="store_true")
    add_connection_flags(parser)
    parser.set_defaults(func=_reprioritize)


# --- limits -----------------------------------------------------------------------------------


def _set(args: argparse.Namespace) -> int:
    rate, burst = parse_rate(args.rate), check_burst(args.burst)
    settings = settings_from(args)
    check_task_type(settings, args.task_type, args.force)
    with Client(settings) as client:
        outcomes = client.set_rate_limit(args.task_type, rate, burst=burst, reason=args.reason,
                                         requested_by=args.by, wait=max(args.wait, 0.0))
    verdict = tally(outcomes)
    line = f"task type {args.task_type} limited to {shown_rate(rate)} (burst {burst}) in {verdict.changed} of " \
           f"{verdict.total} partition(s)"
    share = _share([o for o in outcomes if o.status == "limited"])
    print(line + (f": each starts at most {share}" if share else "") + _kept(verdict, "had this limit already"))
    return _status(f"limits set {args.task_type}", verdict, args.wait)


def _clear(args: argparse.Namespace) -> int:
    with Client(settings_from(args)) as client:
        outcomes = client.clear_rate_limit(args.task_type, reason=args.reason, requested_by=args.by,
                                           wait=max(args.wait, 0.0))
    verdict = tally(outcomes)
    print(f"rate limit of task type {args.task_type} cleared in {verdict.changed} of {verdict.total} partition(s)"
          + _kept(verdict, "had none"))
    return _status(f"limits clear {args.task_type}", verdict, args.wait)


def _share(changed: list[Outcome]) -> str:
    """One partition's share, as its RateLimitSet says: ``1.67/s, 1 at once``."""
    for outcome in changed:
        for logged in outcome.events:
            body = logged.event.body
            if isinstance(body, m.RateLimitSet):
                return f"{shown_rate(1e6 / body.interval_us)}, {body.partition_burst} at once"
    return ""


def _kept(verdict: Tally, what: str) -> str:
    return f"; {verdict.unchanged} {what}" if verdict.unchanged else ""


def _status(subject: str, verdict: Tally, waited: float) -> int:
    """1 if a partition refused (said on stderr), 4 if one decided nothing in time, else 0."""
    if refused(subject, verdict):
        return EXIT_NEGATIVE
    if verdict.undecided:
        print(f"epochq: {verdict.undecided} partition(s) decided nothing within {waited:g} s (is an engine running?)",
              file=sys.stderr)
        return EXIT_NOT_DONE
    return 0


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with Client(settings) as client:
        found = client.rate_limits()
    say_freshness(settings)
    rows = limit_rows(found, time.time_ns() // 1000)
    if args.json:
        print_json(rows)
        return 0
    print(f"{'task type':24} {'rate':>10} {'burst':>5} {'partitions':>10} {'tokens':>7}  since                 reason")
    for row in rows:
        print(f"{row['task_type'][:24]:24} {row['rate_text']:>10} {row['burst']:>5} {len(row['partitions']):>10} "
              f"{row['tokens']:>7.1f}  {row['since'][:19]:21} {row['reason']}")
    print(f"{len(rows)} rate limit(s)")
    return 0


def limit_rows(found: Iterable[tuple[int, LimitRecord]], now: int) -> list[dict[str, Any]]:
    """One row per task type and setting (rate, burst), summed over the partitions that hold it. Pure."""
    rows: dict[tuple[str, float, int], dict[str, Any]] = {}
    for partition, record in sorted(found, key=lambda pr: (pr[1].task_type, pr[0])):
        b = record.bucket
        row = rows.setdefault((record.task_type, b.rate, b.burst), {
            "task_type": record.task_type, "rate": b.rate, "rate_text": shown_rate(b.rate), "burst": b.burst,
            "partition_rate": 1e6 / b.interval_us, "partition_burst": b.capacity, "partitions": [],
            "tokens": 0.0, "since": _iso(record.since), "reason": record.reason, "requested_by": record.requested_by})
        row["partitions"].append(partition)
        row["tokens"] = round(row["tokens"] + b.tokens(now), 3)
    return list(rows.values())


def _iso(us: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(us / 1e6))


# --- reprioritize ------------------------------------------------------------------------------


def _reprioritize(args: argparse.Namespace) -> int:
    priority = parse_priority(args.priority)
    if not args.wait >= 0:  # also NaN
        raise ValidationError(f"--wait: must be seconds >= 0, got {args.wait}", "wait")
    with Client(settings_from(args)) as client:
        tenant = args.tenant or tenant_of_job(client, args.job_id, "reprioritize")
        receipt = client.reprioritize(args.job_id, priority, tenant=tenant, reason=args.reason,
                                      requested_by=args.by, wait=args.wait or None)
    change = _change(receipt)
    if args.json:
        print_json({"job_id": args.job_id, "status": receipt.status, "reason": receipt.reason, **change})
    elif receipt.status == "accepted":
        print(f"job {args.job_id}: priority {change['previous_priority']} -> {change['priority']}"
              + (f", lane {change['lane']}" if change.get("lane") else ""))
    elif receipt.status == "refused":
        print(f"job {args.job_id}: reprioritize refused: {receipt.reason}")
    else:
        late = f"; no decision within {args.wait:g} s (is an engine running?)" if args.wait else ""
        print(f"reprioritize of job {args.job_id} sent{late}")
    if receipt.status == "refused":
        return EXIT_NEGATIVE
    return EXIT_NOT_DONE if receipt.status == "sent" and args.wait else 0


def _change(receipt: Receipt) -> dict[str, Any]:
    for event in receipt.events:
        if isinstance(event.body, m.JobReprioritized):
            body = event.body
            return {"priority": body.priority, "previous_priority": body.previous_priority, "lane": body.lane}
    return {"priority": None, "previous_priority": None, "lane": None}
