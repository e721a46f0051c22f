"""``epochq cancel JOB``, ``epochq pause|resume TYPE``: operator controls, each decided by a partition's owner."""

from __future__ import annotations

import argparse
import getpass
import sys

from engine.cli.common import (
    EXIT_NEGATIVE, EXIT_NOT_DONE, add_connection_flags, print_json, refused, seconds, settings_from,
)
from engine.cli.jobs import outcome_json, show_change
from engine.client import Client, Outcome
from engine.contract.validation import check_job_id
from engine.cli.tasktypes import add_force_flag, check_task_type, list_paused
from engine.errors import AccessDeniedError, NotFoundError, ValidationError
from engine.questions.waiting import decided
from engine.questions.tally import tally


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cancel``, ``pause`` and ``resume``."""
    cancel = sub.add_parser("cancel", help="cancel a job: a waiting one at once, a running one once it stops")
    cancel.add_argument("job_id")
    cancel.add_argument("--tenant", default="", help="the job's tenant (default: read from the job's history)")
    cancel.add_argument("--reason", default="", help="why (recorded in the event)")
    cancel.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
    cancel.add_argument("--wait", type=seconds, default=30.0,
                        help="seconds to wait for the job to end (default 30; 0: only send the command)")
    cancel.add_argument("--json", action="store_true")
    add_connection_flags(cancel)
    cancel.set_defaults(func=_cancel)
    for verb, text in (("pause", "start no job of a task type (queued jobs wait, running ones finish)"),
                       ("resume", "start jobs of a paused task type again")):
        one = sub.add_parser(verb, help=text)
        one.add_argument("task_type", nargs="?" if verb == "pause" else None)
        one.add_argument("--reason", default="", help="why (recorded in the event)")
        one.add_argument("--by", default=getpass.getuser(), help="who (default: your user name)")
        one.add_argument("--wait", type=seconds, default=10.0, help="seconds to wait for every partition's decision")
        add_force_flag(one)
        if verb == "pause":
            one.add_argument("--list", action="store_true", help="list the paused task types: since, by whom, why")
            one.add_argument("--json", action="store_true", help="with --list: one JSON document")
        add_connection_flags(one)
        one.set_defaults(func=_pause)


def _cancel(args: argparse.Namespace) -> int:
    with Client(settings_from(args)) as client:
        tenant = args.tenant or tenant_of_job(client, args.job_id)
        handle = client.cancel(args.job_id, tenant=tenant, reason=args.reason, requested_by=args.by)
        if not args.wait:
            print(f"cancel of job {args.job_id} sent")
            return 0
        outcome = handle.wait(args.wait, watch=show_change, until=decided)
    if args.json:
        print_json({**outcome_json(outcome), "refusal": outcome.refusal})
    else:
        print(_verdict(outcome, args.wait))
    return _status(outcome)


def _pause(args: argparse.Namespace) -> int:
    """Pause or resume a task type in every partition; one line saying in how many it changed."""
    if getattr(args, "list", False):
        if args.task_type:
            raise ValidationError("pause --list: give no task type (it lists them all)")
        return list_paused(args)
    if not args.task_type:
        raise ValidationError("pause: give a TASK_TYPE, or --list to see the paused ones")
    settings = settings_from(args)
    check_task_type(settings, args.task_type, args.force)
    with Client(settings) as client:
        change = client.pause_task_type if args.command == "pause" else client.resume_task_type
        outcomes = change(args.task_type, reason=args.reason, requested_by=args.by, wait=max(args.wait, 0.0))
    verdict = tally(outcomes)
    done = "paused" if args.command == "pause" else "resumed"
    already = f", already {'paused' if args.command == 'pause' else 'running'} in {verdict.unchanged}" \
        if verdict.unchanged else ""
    print(f"task type {args.task_type} {done} in {verdict.changed} of {verdict.total} partition(s){already}")
    if refused(f"{args.command} {args.task_type}", verdict):
        return EXIT_NEGATIVE
    if verdict.undecided:
        print(f"epochq: {verdict.undecided} partition(s) decided nothing within {args.wait:g} s "
              "(is an engine running?)", file=sys.stderr)
        return EXIT_NOT_DONE
    return 0


def tenant_of_job(client: Client, job_id: str, command: str = "cancel") -> str:
    """The job's tenant, from its first event (a command acts only within its job's tenant); NotFoundError if none."""
    check_job_id(job_id)
    try:
        return client.tenant_of(job_id, command)
    except NotFoundError:
        raise NotFoundError(f"unknown job {job_id}: no events in the log (give --tenant to send the {command} "
                            "anyway)") from None
    except AccessDeniedError as e:  # a service without READ on the events: it knows its own job's tenant
        raise AccessDeniedError(f"{e}; the {command} reads the job's tenant there: name it with --tenant (and "
                                f"--wait 0 to only send the {command})") from None


def _verdict(outcome: Outcome, waited: float) -> str:
    """One line saying how the cancel ended."""
    job = f"job {outcome.job_id}"
    if outcome.refusal is not None:
        return f"{job}: cancel refused: {outcome.refusal.split(': ', 1)[-1]}"
    if outcome.status == "cancelled":
        return f"{job} cancelled"
    if outcome.done:
        return f"{job} ended {outcome.status} before it stopped: the cancel came too late"
    if outcome.status == "submitted":
        return f"cancel of {job} sent; no decision within {waited:g} s (is an engine running?)"
    return f"{job} still {outcome.status} after {waited:g} s (asked to stop; given up after the engine's cancel grace)"


def _status(outcome: Outcome) -> int:
    if outcome.status == "cancelled":
        return 0
    if outcome.done or outcome.refusal is not None:
        return EXIT_NEGATIVE
    print(f"epochq: job {outcome.job_id} still {outcome.status}", file=sys.stderr)
    return EXIT_NOT_DONE
