"""``epochq dlq list|show|replay``: the dead-letter queue, read from the projections."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from engine.cli.common import EXIT_NEGATIVE, add_connection_flags, print_json, settings_from, since_us
from engine.cli.fresh import say_freshness
from engine.cli.hints import no_match
from engine.cli.times import shown
from engine.client import Client, Outcome
from engine.config import Settings
from engine.domain.jobs import JobView
from engine.errors import NotFoundError, ValidationError
from engine.questions.deadletters import DeadPage, DeadQuery, dead_page
from engine.questions.jobs import check_limit
from engine.questions.lookup import dead_names
from engine.questions.view_status import await_view
from engine.questions.stores import DeadFilter, dead_letters, find_job

SINCE_HELP = "dead-lettered at or after: 15m, 2h, 1d (that long ago) or ISO-8601 (UTC if no zone)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``dlq`` subcommand."""
    parser = sub.add_parser("dlq", help="list, show and replay dead-lettered jobs")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="one page of dead jobs, newest first")
    _filters(listing)
    listing.add_argument("--limit", type=int, default=50, help="rows per page (default 50, at most 1,000)")
    listing.add_argument("--cursor", help="the next-cursor of the previous page")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=_list)
    show = verbs.add_parser("show", help="one dead job: payload, every attempt's error and traceback")
    show.add_argument("job_id")
    show.add_argument("--json", action="store_true")
    add_connection_flags(show)
    show.set_defaults(func=_show)
    replay = verbs.add_parser("replay", help="put dead jobs back with a fresh attempt count")
    replay.add_argument("job_id", nargs="?", help="one job; or use the filters")
    _filters(replay)
    replay.add_argument("--reason", required=True, help="why (recorded in the JobReplayed event)")
    replay.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
    replay.add_argument("--all", action="store_true", help="replay every dead job, of every tenant (no filter)")
    replay.add_argument("--yes", action="store_true", help="replay a filter's jobs without asking")
    replay.set_defaults(func=_replay)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-type")
    parser.add_argument("--tenant")
    parser.add_argument("--since", help=SINCE_HELP)
    parser.add_argument("--until", help="dead-lettered before: 15m, 2h, 1d ago or ISO-8601")
    add_connection_flags(parser)


def _filter(args: argparse.Namespace) -> DeadFilter:
    return DeadFilter(args.task_type, args.tenant, since_us(args.since, "--since"), since_us(args.until, "--until"))


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
            "reason": job.dead_reason, "attempts": job.counted_attempts(), "dead_at_us": job.finished_at,
            "submitted_at_us": job.submitted_at, "replays": job.replays,
            "payload": job.payload.data.decode("utf-8", "replace"), "content_type": job.payload.content_type,
            "errors": [{"attempt": e.attempt, "error_type": e.error_type, "message": e.message,
                        "traceback": e.traceback, "duration_us": e.duration_us, "failed_at_us": e.failed_at}
                       for e in job.errors]}


def newest_first(jobs: list[JobView]) -> list[JobView]:
    """Dead jobs by time of death, the newest first (then by id, for a stable order). Pure."""
    return sorted(jobs, key=lambda j: (-(j.finished_at or 0), j.job_id))


def _list(args: argparse.Namespace) -> int:
    limit = check_limit(args.limit)
    settings = settings_from(args)
    await_view(settings)
    where = _filter(args)
    page = dead_page(settings, DeadQuery(where), after=args.cursor, limit=limit)
    say_freshness(settings)
    if args.json:
        print_json([dead_json(j) for j in page.rows])
        print(f"epochq: next-cursor: {page.next_cursor or 'none (last page)'}", file=sys.stderr)
    else:
        _print_page(page)
    if not page.rows and not args.cursor:
        _say_unmatched(settings, where)
    return 0


def _print_page(page: DeadPage) -> None:
    if page.rows:
        print(f"{'dead at (UTC)':24} {'tenant':12} {'task type':20} {'reason':24} {'att':>3}  {'job':36}  last error")
    for job in page.rows:
        print(f"{shown(job.finished_at):24} {job.tenant_id[:12]:12} {job.task_type[:20]:20} "
              f"{job.dead_reason[:24]:24} {job.counted_attempts():>3}  {job.job_id:36}  {_last_error(job)[:60]}")
    print(f"{len(page.rows)} of {page.total}{'' if page.exact else '+'} dead job(s)")
    print(f"next-cursor: {page.next_cursor}" if page.next_cursor else "next-cursor: none (last page)")


def _say_unmatched(settings: Settings, where: DeadFilter) -> None:
    """On stderr: a ``--tenant`` or ``--task-type`` no dead job has, with the ones dead jobs have (from the
    catalog's counters: nothing but the counters is read)."""
    tenants, task_types = dead_names(settings)
    for flag, given, seen, kind in (("--tenant", where.tenant, tenants, "tenant"),
                                    ("--task-type", where.task_type, task_types, "task type")):
        if given and given not in seen:
            print(f"epochq: {no_match('dead job', flag, given, seen, kind)}", file=sys.stderr)


def _last_error(job: JobView) -> str:
    last = job.errors[-1] if job.errors else None
    return f"{last.error_type}: {last.message}" if last else ""


def _show(args: argparse.Namespace) -> int:
    job = _dead_job(settings_from(args), args.job_id)
    if args.json:
        print(json.dumps(dead_json(job), indent=2))
        return 0
    print("\n".join(dead_text(job)))
    return 0


def dead_text(job: JobView) -> list[str]:
    """A dead job as lines of text, as ``history`` reads: what it is, when it died, then each attempt's error
    with its time and its traceback as it was printed. Pure."""
    lines = [f"job {job.job_id}: dead ({job.dead_reason}) at {shown(job.finished_at)}",
             f"  tenant: {job.tenant_id}", f"  task type: {job.task_type}",
             f"  submitted: {shown(job.submitted_at)}", f"  attempts: {job.counted_attempts()}",
             f"  replays: {job.replays}", f"  payload ({job.payload.content_type}): "
             f"{job.payload.data.decode('utf-8', 'replace')}"]
    for error in job.errors:
        lines.append(f"attempt {error.attempt} failed at {shown(error.failed_at)} after "
                     f"{error.duration_us / 1000:.1f} ms: {error.error_type}: {error.message}")
        lines.extend(f"    {line}" for line in error.traceback.rstrip("\n").splitlines())
    return lines


def _dead_job(settings: Any, job_id: str) -> JobView:
    found = find_job(settings, job_id)
    if found is None or found[1].state.value != "dead":
        raise NotFoundError(f"job {job_id} is not in the dead-letter queue of this state directory")
    return found[1]


def _replay(args: argparse.Namespace) -> int:
    _check_scope(args)
    settings = settings_from(args)
    where = _filter(args)
    if args.job_id:
        jobs = [_one_job(settings, args.job_id, where)]
    else:
        jobs = newest_first(dead_letters(settings, where))
        say_freshness(settings)
        if not jobs:
            print(f"no dead job matches (in the projections of {settings.state_dir})")
            return EXIT_NEGATIVE
        if not args.yes and not _confirmed(len(jobs)):
            print("nothing replayed")
            return EXIT_NEGATIVE
    with Client(settings) as client:
        handles = []
        for job in jobs:
            handles.append(client.replay(job.job_id, tenant=job.tenant_id, reason=args.reason, requested_by=args.by))
            print(f"replay requested: {job.job_id} ({job.task_type}, {job.tenant_id})")
        answers = client.wait_all(handles, REPLAY_WAIT_S, until=lambda o: bool(o.events))
    print(f"{len(jobs)} job(s) sent for replay")
    return _refusals(answers)


REPLAY_WAIT_S = 10.0
"""How long a replay waits for the owners' answers (the first event after it: replayed, or refused)."""


def _refusals(answers: list[Outcome]) -> int:
    """Say on stderr which replays the owners refused (the job had moved on, say); 1 if any was."""
    refused = [o for o in answers if o.refusal is not None]
    for outcome in refused:
        print(f"epochq: job {outcome.job_id}: {outcome.refusal}", file=sys.stderr)
    if refused:
        print(f"epochq: dlq replay: refused for {len(refused)} of {len(answers)} job(s)", file=sys.stderr)
    return EXIT_NEGATIVE if refused else 0


def _one_job(settings: Any, job_id: str, where: DeadFilter) -> JobView:
    """The dead job named, if the filters given with it admit it (``--tenant``: a command acts only within
    its job's tenant); NotFoundError naming the filter otherwise."""
    job = _dead_job(settings, job_id)
    if where.tenant is not None and job.tenant_id != where.tenant:
        raise NotFoundError(f"job {job_id} is not a dead job of tenant {where.tenant!r}")
    if not where.admits(job):
        raise NotFoundError(f"job {job_id} is dead but does not match the filters given")
    return job


def _confirmed(count: int) -> bool:
    """Ask on a terminal; refuse without one (a script says --yes)."""
    if not sys.stdin.isatty():
        raise ValidationError(f"dlq replay: {count} dead job(s) match; give --yes to replay them without a prompt")
    answer = input(f"replay {count} dead job(s)? [y/N] ")
    return answer.strip().lower() in ("y", "yes")
