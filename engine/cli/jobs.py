"""``epochq submit``, ``epochq status JOB`` and ``epochq history JOB``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from engine.cli.common import (
    EXIT_NEGATIVE, EXIT_NOT_DONE, PAYLOAD_HELP, add_connection_flags, parse_time, print_json, read_payload,
    seconds, settings_from,
)
from engine.cli.catalog import parse_labels
from engine.cli.tasktypes import add_force_flag, check_submitted_type
from engine.client import Client, Outcome
from engine.contract import messages as m
from engine.contract.ids import job_id_for_key
from engine.errors import NotFoundError
from engine.clock import now_us
from engine.contract.partitioner import partition_for
from engine.questions.holdups import Holdups, clock, projection_source
from engine.questions.history import job_history
from engine.questions.logged import event_json, iso_time
from engine.questions.traces import trace_id


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``submit``, ``status`` and ``history``."""
    submit = sub.add_parser("submit", help="submit one job")
    submit.add_argument("task_type")
    submit.add_argument("--tenant", required=True)
    submit.add_argument("--payload", default="{}", help=PAYLOAD_HELP)
    submit.add_argument("--priority", default="5", help="0-9 or critical/high/normal/low")
    submit.add_argument("--delay", type=float, help="seconds from now (>= 0)")
    submit.add_argument("--run-at", help="ISO-8601 time with zone, e.g. 2026-12-01T09:00:00+01:00")
    submit.add_argument("--key", help="idempotency key")
    submit.add_argument("--lane", help="BATCH for bulk work")
    submit.add_argument("--label", action="append", default=[], metavar="K=V",
                        help="a label to find the job by (`jobs list --label`); repeat for several")
    submit.add_argument("--after", action="append", default=[], metavar="JOB",
                        help="a job (same tenant) this one waits for; repeat for several (docs/handlers.md)")
    submit.add_argument("--if-dependency-fails", choices=("cancel", "run"), default="cancel",
                        help="when a job of --after dies or is cancelled: cancel this one (default) or run it")
    submit.add_argument("--wait", action="store_true", help="wait for the outcome")
    submit.add_argument("--timeout", type=seconds, default=30.0, help="seconds --wait waits (default 30)")
    submit.add_argument("--json", action="store_true")
    add_force_flag(submit)
    add_connection_flags(submit)
    submit.set_defaults(func=_submit)
    for name, fn, text in (("status", _status, "a job's current status"),
                           ("history", _history, "every event of a job")):
        parser = sub.add_parser(name, help=text)
        parser.add_argument("job_id")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--tenant", help="ask as this tenant: another tenant's job reads as unknown "
                                             "(default: as an operator, every job)")
        add_connection_flags(parser)
        parser.set_defaults(func=fn)


def _submit(args: argparse.Namespace) -> int:
    run_at, payload = parse_time(args.run_at, "run_at"), read_payload(args.payload)
    settings = settings_from(args)
    check_submitted_type(settings, args.task_type, args.force)
    with Client(settings) as client:
        known = client.status(job_id_for_key(args.tenant, args.key)) if args.key else None
        handle = client.submit(args.task_type, payload, tenant=args.tenant,
                               priority=args.priority, delay=args.delay, run_at=run_at,
                               idempotency_key=args.key, lane=args.lane, labels=dict(parse_labels(args.label)),
                               depends_on=args.after, if_dependency_fails=args.if_dependency_fails)
        outcome = handle.wait(args.timeout, watch=show_change) if args.wait else Outcome(handle.job_id)
    the_key = known if known is not None and known.known else (outcome if outcome.duplicate else None)
    if the_key is not None:  # one line: the key's job, and that nothing new was submitted
        print(f"epochq: {duplicate_line(the_key, args.key, payload)}", file=sys.stderr)
    _say_submitted(args, handle.partition, outcome, duplicate=the_key is not None)
    return _submit_status(outcome, args)


def _say_submitted(args: argparse.Namespace, partition: int, outcome: Outcome, duplicate: bool) -> None:
    """stdout of a submit: the job and where it went, or for a duplicate nothing (the key's job with --wait)."""
    if args.json:
        print_json({**outcome_json(outcome), "duplicate": duplicate, "partition": partition})
    elif not duplicate:
        print(f"job {outcome.job_id} submitted to partition {partition}: {outcome.status}")
        _print_outcome(outcome)
    elif args.wait:  # the key's job, as it stands now
        print(f"job {outcome.job_id}: {outcome.status}")
        _print_outcome(outcome)


def duplicate_line(known: Outcome, key: str, payload: Any) -> str:
    """What ``submit --key`` says of a key already used: the job it names, and whether the payload given differs
    from that job's (the job keeps its own; the submit made no new job). Pure."""
    line = f"duplicate: key {key!r} is job {known.job_id} ({known.status}); no new job was submitted"
    first = next((e.event.body for e in known.events if isinstance(e.event.body, m.JobSubmitted)), None)
    if first is None:
        return line
    try:
        same = json.loads(first.payload.data) == payload
    except ValueError:
        same = False
    return line if same else f"{line}, and the payload given differs from that job's (the job keeps its own)"


def show_change(outcome: Outcome) -> None:
    """While ``--wait`` waits: each change of status on stderr (stdout keeps the one result line)."""
    line = change_line(outcome)
    if line is not None:
        print(f"epochq: job {outcome.job_id}: {line}", file=sys.stderr)


def change_line(outcome: Outcome) -> str | None:
    """What a waiter is told of a change: the status, what holds a queued job, an attempt's failure. Pure.

    None for ``failed``: the next event says whether the job is retrying or dead."""
    status = outcome.status
    if status == "queued" and outcome.held is not None:
        return outcome.held
    if status == "failed":
        return None
    if status == "waiting" and outcome.dependencies:
        return f"waiting for {len(outcome.dependencies)} job(s)"
    if status == "running" and outcome.attempts:
        return f"running{_on_pool(outcome)} (attempt {outcome.attempts}{_requeued(outcome)})"
    if status == "queued" and outcome.requeued_why and outcome.events[-1].event.type == "JobRequeued":
        return f"queued again ({outcome.requeued_why}: the attempt is not counted)"
    if status == "retrying":
        due = f"; attempt {outcome.attempts + 1} at {clock(outcome.due_at)}" if outcome.due_at is not None else ""
        return f"retrying: attempt {outcome.attempts} failed ({outcome.error}){due}"
    if status in ("dead", "rejected", "cancelled", "cancelling") and (outcome.reason or outcome.error):
        return f"{status} ({outcome.reason or outcome.error})"
    return status


def _on_pool(outcome: Outcome) -> str:
    """Where a running attempt runs, when a remote pool's workers run it (``JobStarted.pool``)."""
    return f" on pool {outcome.pool}" if outcome.pool and outcome.status in ("running", "cancelling") else ""


def _requeued(outcome: Outcome) -> str:
    """What a line about attempts adds when some were re-queued: they are not counted (docs/operations.md)."""
    return f", and {outcome.requeues} re-queued ({outcome.requeued_why}), not counted" if outcome.requeues else ""


def _submit_status(outcome: Outcome, args: argparse.Namespace) -> int:
    """What ``submit`` exits with: 1 for a job that ended dead or rejected, 4 for one not final within --timeout."""
    if outcome.status in ("dead", "rejected"):
        return EXIT_NEGATIVE
    if args.wait and not outcome.done:
        print(f"epochq: job {outcome.job_id} still {outcome.status} after {args.timeout:g} s{_why_waiting(outcome)}",
              file=sys.stderr)
        return EXIT_NOT_DONE
    return 0


def _why_waiting(outcome: Outcome) -> str:
    """What a wait that ran out adds: what holds the job, or that no engine decided its command at all."""
    if outcome.held:
        return f" ({outcome.held})"
    pending = [job_id for job_id, status in outcome.dependencies.items() if status == "pending"]
    if outcome.status == "waiting" and pending:
        return f" (waiting for {len(pending)} job(s): {', '.join(pending[:3])}{', …' if len(pending) > 3 else ''})"
    if not outcome.known:
        return " (no engine decided its command: is one running on this namespace?)"
    return ""


def _status(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with Client(settings) as client:
        outcome = client.status(args.job_id, tenant=args.tenant)
        if outcome.status == "queued" and outcome.task_type is not None and outcome.held is None:
            partition = partition_for(outcome.job_id, client._partition_count())
            outcome.held = Holdups(projection_source(settings)).why(outcome.task_type, partition, now_us())
    if not outcome.known:
        raise NotFoundError(f"unknown job {args.job_id}: no events in the log (a mistyped id, "
                            "or a command no engine has decided yet)")
    if args.json:
        print_json(outcome_json(outcome))
    else:
        held = f" ({outcome.held})" if outcome.held else ""
        print(f"job {outcome.job_id}: {outcome.status}{_on_pool(outcome)}{held} after {outcome.attempts} attempt(s)"
              f"{_requeued(outcome)}")
        _print_outcome(outcome)
        for tenant, child in sorted(outcome.children.items()):
            print(f"  {tenant:20} {child['status']:10} {child['job_id']}  {child['error']}")
        _print_dependencies(outcome)
    return 0


SHOWN_DEPENDENCIES = 20


def _print_dependencies(outcome: Outcome) -> None:
    """What a job waits for (each dependency with how it ended, as the job was told) and who waits for it."""
    for title, rows in (("waits for", [f"{status:10} {job_id}" for job_id, status in outcome.dependencies.items()]),
                        ("dependents", outcome.dependents)):
        if rows:
            print(f"  {title} ({len(rows)}):")
            for row in rows[:SHOWN_DEPENDENCIES]:
                print(f"    {row}")
            if len(rows) > SHOWN_DEPENDENCIES:
                print(f"    … and {len(rows) - SHOWN_DEPENDENCIES} more (--json lists them all)")


def _history(args: argparse.Namespace) -> int:
    events = job_history(settings_from(args), args.job_id, args.tenant)
    if not events:
        raise NotFoundError(f"unknown job {args.job_id}: no events in the log")
    if args.json:
        print_json([event_json(e) for e in events])
        return 0
    submitter = next((e.traceparent for e in events if e.traceparent), None)
    if submitter is not None:
        print(f"trace {trace_id(submitter) or submitter}")
    print(f"{'time (UTC)':26} {'offset':>7} {'epoch':>5} {'owner':18} {'attempt':>7}  event")
    for logged in events:
        row = event_json(logged)
        mark = "  [FENCED: ignored]" if logged.fenced else ""
        print(f"{row['time']:26} {row['offset']:>7} {row['epoch']:>5} {row['owner'][:18]:18} "
              f"{row['attempt'] if row['attempt'] is not None else '':>7}  {row['type']}{_brief(row)}{mark}"
              f"{_span(logged.traceparent, submitter)}")
    return 0


def _span(traceparent: str | None, submitter: str | None) -> str:
    """The span an event's trace context names, where it is not the submitter's (an attempt's: docs/tracing.md)."""
    if traceparent is None or traceparent == submitter:
        return ""
    return f"  [span {traceparent.split('-')[2] if traceparent.count('-') == 3 else traceparent}]"


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    """The stable JSON form of an outcome (documented in docs/cli.md)."""
    return {"job_id": outcome.job_id, "status": outcome.status, "done": outcome.done,
            "result": outcome.result, "error": outcome.error, "reason": outcome.reason,
            "attempts": outcome.attempts, "requeues": outcome.requeues, "duplicate": outcome.duplicate,
            "pool": outcome.pool,
            "events": len(outcome.events),
            "children": outcome.children, "due_us": outcome.due_at, "progress": _progress_json(outcome),
            "due": iso_time(outcome.due_at) if outcome.due_at is not None else None,
            "dependencies": outcome.dependencies, "dependents": outcome.dependents, "ignored": outcome.ignored}


def _brief(row: dict[str, Any]) -> str:
    detail = row["detail"]
    if row["error"]:
        return f"  {row['error']}"
    if row["type"] == "JobProgressed":
        return f"  value={detail.get('value')} {detail.get('message', '')}".rstrip()
    if row["type"] == "JobReprioritized":
        return f"  priority {detail['previous_priority']} -> {detail['priority']}, lane {detail['lane']}"
    if row["type"] in DEPENDENCY_ROWS:
        return DEPENDENCY_ROWS[row["type"]](detail)
    if row["type"] == "JobRejected" and detail.get("detail"):
        return f"  reason={detail.get('reason')}: {detail['detail']}"
    if row["type"] == "JobStarted" and detail.get("pool"):  # dispatched to a remote pool (v7)
        return f"  pool={detail['pool']} due_at={iso_time(detail['due_at'])}"
    for key in ("reason", "cause", "due_at"):
        if detail.get(key) not in (None, ""):
            value = iso_time(detail[key]) if key == "due_at" else detail[key]
            return f"  {key}={value}"
    return ""


DEPENDENCY_ROWS: dict[str, Callable[[dict[str, Any]], str]] = {
    "DependenciesAwaited": lambda d: f"  waits for {d['count']} job(s)",
    "DependentAdded": lambda d: f"  job {d['dependent_job_id']} waits for this one",
    "DependencyReported": lambda d: f"  job {d['dependency_job_id']} {d['status']}"
                                    + (f": {d['error']}" if d.get("error") else ""),
}
"""The history rows of jobs that wait for jobs: what each says."""


def _progress_json(outcome: Outcome) -> dict[str, Any] | None:
    if outcome.progress is None:
        return None
    value, message = outcome.progress
    return {"value": value, "message": message}


def _progress_text(value: float | None, message: str) -> str:
    return " ".join(part for part in ("" if value is None else f"{value:g}", message) if part)


def _print_outcome(outcome: Outcome) -> None:
    if outcome.due_at is not None and outcome.status in ("scheduled", "retrying"):
        print(f"  due: {iso_time(outcome.due_at)}")
    if outcome.progress is not None:
        print(f"  progress: {_progress_text(*outcome.progress)}")
    for label, value in (("result", outcome.result), ("error", outcome.error), ("reason", outcome.reason)):
        if value is not None:
            print(f"  {label}: {json.dumps(value, ensure_ascii=False) if label == 'result' else value}")
    fenced = sum(1 for logged in outcome.events if logged.fenced)
    if outcome.ignored or fenced:
        print(f"  ignored: {outcome.ignored + fenced} event(s), {fenced} fenced, {outcome.ignored} the job's lifecycle "
              "forbids where it stood (forged, or a zombie's): the owner's fold ignores them too (`epochq history`)")
