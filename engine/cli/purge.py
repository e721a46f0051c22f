"""``epochq purge queued|dead``: cancel every queued job, or give up every dead one, that a filter matches."""

from __future__ import annotations

import argparse
import getpass
import sys

from engine.cli.common import EXIT_NOT_DONE, add_connection_flags, seconds, settings_from, since_us
from engine.cli.fresh import say_freshness
from engine.client import Client
from engine.domain.jobs import JobView
from engine.errors import ValidationError
from engine.questions.waiting import decided
from engine.questions.stores import DeadFilter, dead_letters, queued_jobs


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``purge``."""
    purge = sub.add_parser("purge", help="cancel the queued jobs, or give up the dead jobs, that a filter matches")
    purge.add_argument("state", choices=("queued", "dead"))
    purge.add_argument("--task-type")
    purge.add_argument("--tenant")
    purge.add_argument("--since", help="submitted (queued) / dead-lettered (dead) at or after: "
                                            "15m, 2h, 1d ago or ISO-8601")
    purge.add_argument("--until", help="submitted / dead-lettered before: 15m, 2h, 1d ago or ISO-8601")
    purge.add_argument("--reason", required=True, help="why (recorded in each JobCancelled)")
    purge.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    purge.add_argument("--wait", type=seconds, default=30.0, help="seconds to wait for the owners' decisions")
    add_connection_flags(purge)
    purge.set_defaults(func=_purge)


def _purge(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    where = DeadFilter(args.task_type, args.tenant, since_us(args.since, "--since"), since_us(args.until, "--until"))
    jobs = (queued_jobs if args.state == "queued" else dead_letters)(settings, where)
    say_freshness(settings)
    if not jobs:
        print(f"no {args.state} job matches (in the projections of {settings.state_dir})")
        return 0
    if not args.yes and not _confirmed(len(jobs), args.state):
        print("nothing purged")
        return 1
    with Client(settings) as client:
        handles = client.cancel_many([(j.job_id, j.tenant_id) for j in jobs], reason=f"purge: {args.reason}",
                                     requested_by=args.by)
        outcomes = client.wait_all(handles, args.wait, until=decided)
    return _report(jobs, [o.status for o in outcomes], [o.refusal is not None for o in outcomes])


def _confirmed(count: int, state: str) -> bool:
    """Ask on a terminal; refuse without one (a script says --yes)."""
    if not sys.stdin.isatty():
        raise ValidationError(f"purge: {count} {state} job(s) match; give --yes to purge them without a prompt")
    answer = input(f"purge {count} {state} job(s)? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _report(jobs: list[JobView], statuses: list[str], refused: list[bool]) -> int:
    purged = statuses.count("cancelled")
    moved_on = sum(refused)
    undecided = len(jobs) - purged - moved_on
    print(f"{purged} of {len(jobs)} job(s) purged" + (f"; {moved_on} had moved on (refused)" if moved_on else ""))
    if undecided:
        print(f"epochq: {undecided} job(s) not decided yet (is an engine running?)", file=sys.stderr)
        return EXIT_NOT_DONE
    return 0

