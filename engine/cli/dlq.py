"""``epochq dlq list|show|replay``: the dead-letter queue, read from the projections."""

from __future__ import annotations

import argparse
import getpass
import json
from datetime import datetime
from typing import Any

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.cli.fresh import say_freshness
from engine.client import Client
from engine.domain.jobs import JobView
from engine.errors import ConfigError, NotFoundError, ValidationError
from engine.runtime.view.status import await_view
from projections.query import DeadFilter, dead_letters, find_job


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``dlq`` subcommand."""
    parser = sub.add_parser("dlq", help="list, show and replay dead-lettered jobs")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="dead jobs, oldest first")
    _filters(listing)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    show = verbs.add_parser("show", help="one dead job: payload, every attempt's error")
    show.add_argument("job_id")
    add_connection_flags(show)
    show.set_defaults(func=_show)
    replay = verbs.add_parser("replay", help="put dead jobs back with a fresh attempt count")
    replay.add_argument("job_id", nargs="?", help="one job; or use the filters")
    _filters(replay)
    replay.add_argument("--reason", required=True, help="why (recorded in the JobReplayed event)")
    replay.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
    replay.add_argument("--all", action="store_true", help="replay every dead job, of every tenant (no filter)")
    replay.set_defaults(func=_replay)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-type")
    parser.add_argument("--tenant")
    parser.add_argument("--since", help="ISO-8601 time: dead-lettered at or after")
    parser.add_argument("--until", help="ISO-8601 time: dead-lettered before")
    add_connection_flags(parser)


def _filter(args: argparse.Namespace) -> DeadFilter:
    return DeadFilter(args.task_type, args.tenant, _us(args.since, "--since"), _us(args.until, "--until"))


def _us(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not an ISO-8601 time, e.g. 2026-12-01T09:00:00+00:00") from None
    if when.tzinfo is None:
        raise ConfigError(f"{flag}: give a time zone, e.g. {text}+00:00")
    return int(when.timestamp() * 1_000_000)


def _check_scope(args: argparse.Namespace) -> None:
    """Refuse a replay of the whole dead-letter queue that did not say ``--all``, and ``--all`` with a target."""
    targeted = args.job_id or any((args.task_type, args.tenant, args.since, args.until))
    if not targeted and not args.all:
        raise ValidationError("dlq replay: give a JOB, a filter (--task-type, --tenant, --since, --until), "
                              "or --all to replay every dead job of every tenant")
    if targeted and args.all:
        raise ValidationError("dlq replay: --all replays everything; drop it to use a JOB or filters")


def dead_json(job: JobView) -> dict[str, Any]:
    """The stable JSON form of a dead-letter entry."""
    return {"job_id": job.job_id, "tenant": job.tenant_id, "task_type": job.task_type,
            "reason": job.dead_reason, "attempts": job.attempt, "dead_at_us": job.finished_at,
            "submitted_at_us": job.submitted_at, "replays": job.replays,
            "payload": job.payload.data.decode("utf-8", "replace"), "content_type": job.payload.content_type,
            "errors": [{"attempt": e.attempt, "error_type": e.error_type, "message": e.message,
                        "traceback": e.traceback, "duration_us": e.duration_us, "failed_at_us": e.failed_at}
                       for e in job.errors]}


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    await_view(settings)
    jobs = dead_letters(settings, _filter(args))
    say_freshness(settings)
    if args.json:
        print_json([dead_json(j) for j in jobs])
        return 0
    for job in jobs:
        last = job.errors[-1] if job.errors else None
        error = f"{last.error_type}: {last.message}" if last else ""
        print(f"{job.job_id}  {job.tenant_id:12} {job.task_type:20} {job.dead_reason:24} {error[:60]}")
    print(f"{len(jobs)} dead job(s)")
    return 0


def _show(args: argparse.Namespace) -> int:
    found = find_job(settings_from(args), args.job_id)
    if found is None or found[1].state.value != "dead":
        raise NotFoundError(f"job {args.job_id} is not in the dead-letter queue of this state directory")
    print(json.dumps(dead_json(found[1]), indent=2))
    return 0


def _replay(args: argparse.Namespace) -> int:
    _check_scope(args)
    settings = settings_from(args)
    if args.job_id:
        found = find_job(settings, args.job_id)
        if found is None or found[1].state.value != "dead":
            raise NotFoundError(f"job {args.job_id} is not in the dead-letter queue of this state directory")
        jobs = [found[1]]
    else:
        jobs = dead_letters(settings, _filter(args))
    with Client(settings) as client:
        for job in jobs:
            client.replay(job.job_id, tenant=job.tenant_id, reason=args.reason, requested_by=args.by)
            print(f"replay requested: {job.job_id} ({job.task_type}, {job.tenant_id})")
    print(f"{len(jobs)} job(s) sent for replay")
    return 0 if jobs else 1
