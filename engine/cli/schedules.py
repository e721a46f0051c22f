"""``epochq schedules add|list|show|pause|resume|remove`` and ``epochq reschedule JOB``."""

from __future__ import annotations

import argparse
import getpass
import time
from typing import Any

from engine.cli.common import (
    PAYLOAD_HELP, add_connection_flags, parse_time, print_json, read_payload, seconds, settings_from,
)
from engine.cli.control import tenant_of_job
from engine.cli.fresh import say_freshness
from engine.cli.jobs import outcome_json
from engine.client import Client
from engine.domain.cron import next_occurrences
from engine.domain.schedules import ScheduleView, iso
from engine.errors import NotFoundError, ValidationError
from engine.schedule_client import Receipt


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``schedules`` and ``reschedule``."""
    parser = sub.add_parser("schedules", help="recurring schedules: cron expression in a time zone")
    verbs = parser.add_subparsers(dest="verb", required=True)
    _add(verbs)
    listing = verbs.add_parser("list", help="every schedule in the state directory's projections")
    listing.add_argument("--tenant")
    listing.add_argument("--json", action="store_true")
    add_connection_flags(listing)
    listing.set_defaults(func=_list)
    show = verbs.add_parser("show", help="one schedule: definition, armed occurrence, last run, next occurrences")
    show.add_argument("schedule_id")
    show.add_argument("--next", type=int, default=5, help="how many upcoming occurrences to list (default 5)")
    show.add_argument("--json", action="store_true")
    add_connection_flags(show)
    show.set_defaults(func=_show)
    for verb, text in (("pause", "stop firing (a run in flight finishes)"),
                       ("resume", "fire again from the next occurrence after now"),
                       ("remove", "delete the schedule (its history stays in the log)")):
        one = verbs.add_parser(verb, help=text)
        one.add_argument("schedule_id")
        one.add_argument("--reason", default="", help="recorded in the event")
        one.add_argument("--by", default=getpass.getuser(), help="who (recorded with the reason)")
        one.add_argument("--tenant", default="", help="the schedule's tenant: a command signed with a tenant's key "
                                                      "names it (docs/security.md); an operator's needs none")
        add_connection_flags(one)
        one.set_defaults(func=_change)
    _reschedule(sub)


def _add(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = verbs.add_parser("add", help="create or replace a schedule")
    add.add_argument("schedule_id")
    add.add_argument("--task", required=True, dest="task_type", help="task type of each occurrence's job")
    add.add_argument("--cron", required=True, help="5 fields, or 6 with seconds last, e.g. '*/10 * * * * *'")
    add.add_argument("--tenant", required=True)
    add.add_argument("--tz", default="UTC", help="IANA time zone the expression is read in (default UTC)")
    add.add_argument("--payload", default="{}", help=f"every occurrence's {PAYLOAD_HELP}")
    add.add_argument("--priority", default="5", help="0-9 or critical/high/normal/low")
    add.add_argument("--misfire", choices=("skip", "run_once", "catch_up"), default="skip",
                     help="missed occurrences: skip (default), run_once, catch_up (capped by --max-catch-up)")
    add.add_argument("--max-catch-up", type=int, default=10)
    add.add_argument("--dst", choices=("first", "both", "skip"), default="first",
                     help="local times that do not exist or happen twice: first (default), both, skip")
    add.add_argument("--paused", action="store_true", help="create it paused")
    add.add_argument("--json", action="store_true")
    add_connection_flags(add)
    add.set_defaults(func=_add_schedule)


def _reschedule(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("reschedule", help="move a scheduled job to another due time")
    parser.add_argument("job_id")
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--run-at", help="+5m, in 2h (from now) or ISO-8601 with a zone, e.g. 2026-12-01T09:00:00+01:00")
    when.add_argument("--delay", type=float, help="seconds from now")
    parser.add_argument("--tenant", default="", help="the job's tenant (default: read from the job's history)")
    parser.add_argument("--reason", default="")
    parser.add_argument("--wait", type=seconds, default=10.0, help="seconds to wait for the decision (0: don't)")
    parser.add_argument("--json", action="store_true")
    add_connection_flags(parser)
    parser.set_defaults(func=_do_reschedule)


# --- commands --------------------------------------------------------------------------------


def _add_schedule(args: argparse.Namespace) -> int:
    payload = read_payload(args.payload)
    with Client(settings_from(args)) as client:
        receipt = client.add_schedule(args.schedule_id, args.task_type, args.cron, tenant=args.tenant,
                                      payload=payload, timezone=args.tz, priority=args.priority,
                                      enabled=not args.paused, misfire_policy=args.misfire,
                                      max_catch_up=args.max_catch_up, dst_policy=args.dst)
    return _print_receipt(receipt, args.json, "upserted")


def _change(args: argparse.Namespace) -> int:
    reason = f"{args.reason} (by {args.by})" if args.reason else f"by {args.by}"
    with Client(settings_from(args)) as client:
        method = {"pause": client.pause_schedule, "resume": client.resume_schedule,
                  "remove": client.remove_schedule}[args.verb]
        receipt = method(args.schedule_id, tenant=args.tenant, reason=reason)
    return _print_receipt(receipt, False, {"pause": "paused", "resume": "resumed", "remove": "removed"}[args.verb])


def _print_receipt(receipt: Receipt, as_json: bool, done: str) -> int:
    if as_json:
        print_json({"schedule_id": receipt.schedule_id, "status": receipt.status, "reason": receipt.reason,
                    "paused": receipt.paused,
                    "armed_us": receipt.armed, "armed": iso(receipt.armed) if receipt.armed else None})
    elif receipt.status == "accepted":
        armed = f"; next occurrence {iso(receipt.armed)}" if receipt.armed else ""
        paused = f"; paused: `epochq schedules resume {receipt.schedule_id}` fires it" if receipt.paused else ""
        print(f"schedule {receipt.schedule_id} {done}{armed}{paused}")
    elif receipt.status == "refused":
        print(f"schedule {receipt.schedule_id}: refused: {receipt.reason}")
    else:
        print(f"schedule {receipt.schedule_id}: command sent; no decision seen yet (is an engine running?)")
    return 0 if receipt.status == "accepted" else 1


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with Client(settings) as client:
        rows = client.schedules(args.tenant)
    say_freshness(settings)
    if args.json:
        print_json([schedule_json(v) for v in rows])
        return 0
    print(f"{'schedule':24} {'tenant':12} {'task type':20} {'cron':18} {'zone':18} {'state':7} next / in flight")
    for v in rows:
        state = "active" if v.enabled else "paused"
        upcoming = f"runs {iso(v.fired)}" if v.fired is not None else (iso(v.armed) if v.armed and v.enabled else "-")
        print(f"{v.schedule_id[:24]:24} {v.tenant_id[:12]:12} {v.task_type[:20]:20} {v.cron[:18]:18} "
              f"{v.timezone[:18]:18} {state:7} {upcoming}")
    print(f"{len(rows)} schedule(s)")
    return 0


def _show(args: argparse.Namespace) -> int:
    if args.next < 0:
        raise ValidationError(f"--next: must be 0 or more, got {args.next}", "next")
    with Client(settings_from(args)) as client:
        view = client.schedule(args.schedule_id)
        last = client.status(view.last_job_id) if view and view.last_job_id else None
    if view is None:
        raise NotFoundError(f"no schedule {args.schedule_id} in the projections of this state directory")
    row = schedule_json(view, args.next)
    row["last_run"] = outcome_json(last) if last is not None else None
    if args.json:
        print_json(row)
        return 0
    for key in ("schedule_id", "tenant", "task_type", "cron", "timezone", "enabled", "priority", "misfire_policy",
                "max_catch_up", "dst_policy", "armed", "in_flight", "in_flight_job_id", "last_finished",
                "last_job_id", "fired", "skipped", "last_skipped", "created", "updated"):
        print(f"{key:18} {row[key] if row[key] is not None else '-'}")
    if last is not None:
        print(f"{'last run':18} {last.status} after {last.attempts} attempt(s)")
    print("next occurrences:" if row["next"] else "next occurrences: none (the calendar has ended)")
    for occurrence in row["next"]:
        print(f"  {occurrence}")
    return 0


def schedule_json(v: ScheduleView, upcoming: int = 0) -> dict[str, Any]:
    """The stable JSON form of a schedule (documented in docs/cli.md)."""
    def when(us: int | None) -> str | None:
        return iso(us) if us is not None else None
    try:
        nxt = [iso(o) for o in next_occurrences(v.definition(), time.time_ns() // 1000, upcoming)] if upcoming else []
    except ValidationError:
        nxt = []
    return {"schedule_id": v.schedule_id, "tenant": v.tenant_id, "task_type": v.task_type, "cron": v.cron,
            "timezone": v.timezone, "enabled": v.enabled, "priority": v.priority,
            "misfire_policy": v.misfire_policy, "max_catch_up": v.max_catch_up, "dst_policy": v.dst_policy,
            "payload": v.payload.data.decode("utf-8", "replace"),
            "armed": when(v.armed) if v.enabled else None, "in_flight": when(v.fired),
            "in_flight_job_id": v.fired_job_id, "last_finished": when(v.last_finished),
            "last_job_id": v.last_job_id, "fired": v.fired_count, "skipped": v.skipped_count,
            "last_skipped": when(v.last_skipped), "created": when(v.created_at), "updated": when(v.updated_at),
            "next": nxt}


def _do_reschedule(args: argparse.Namespace) -> int:
    run_at = parse_time(args.run_at, "run_at")
    with Client(settings_from(args)) as client:
        tenant = args.tenant or tenant_of_job(client, args.job_id, "reschedule")
        receipt = client.reschedule(args.job_id, run_at=run_at, delay=args.delay, tenant=tenant,
                                    reason=args.reason, wait=args.wait or None)
    if args.json:
        print_json({"job_id": args.job_id, "status": receipt.status, "reason": receipt.reason,
                    "due_us": receipt.armed, "due": iso(receipt.armed) if receipt.armed else None})
    elif receipt.status == "accepted":
        print(f"job {args.job_id} rescheduled to {iso(receipt.armed) if receipt.armed else '?'}")
    elif receipt.status == "refused":
        print(f"job {args.job_id}: refused: {receipt.reason}")
    else:
        print(f"reschedule of job {args.job_id} sent" + ("; no decision seen yet" if args.wait else ""))
    return 1 if receipt.status == "refused" else 0
