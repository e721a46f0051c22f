"""Which task types an operator's control may name: those a running engine announced (``--force`` for others),
and ``pause --list``: the paused ones, with who paused them and why."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable
from typing import Any

from engine.cli.common import print_json, settings_from
from engine.cli.fresh import say_freshness
from engine.cli.times import shown
from engine.config import Settings
from engine.errors import EpochqError, ValidationError
from engine.questions.workers import announced_task_types, list_workers
from engine.questions.stores import partition_dirs, read_store
from projections.views.pauses import PauseRecord, all_paused


def add_force_flag(parser: argparse.ArgumentParser) -> None:
    """``--force``: name a task type no running engine has a handler for (one deployed later, say)."""
    parser.add_argument("--force", action="store_true",
                        help="act on a task type that no running engine announced (e.g. one not deployed yet)")


def check_task_type(settings: Settings, task_type: str, force: bool, flag: str = "task type") -> None:
    """Refuse (ValidationError) a task type no running engine announced in its heartbeat, unless ``force``."""
    if force:
        return
    refusal = unannounced(task_type, announced_task_types(list_workers(settings)))
    if refusal is not None:
        raise ValidationError(f"{flag}: {refusal}", "task_type")


def check_submitted_type(settings: Settings, task_type: str, force: bool) -> None:
    """Refuse (ValidationError, with a did-you-mean) a submit of a task type the running engines do not handle,
    when they say which they handle; with no such catalog (no engine running, one that predates it) or ``force``,
    the submit goes as it is (a job may wait for an engine deployed later)."""
    if force:
        return
    try:
        known = announced_task_types(list_workers(settings))
    except EpochqError:  # no heartbeats to read (no <ns>.workers yet, say): no catalog; the submit says the rest
        return
    refusal = unannounced(task_type, known) if known else None
    if refusal is not None:
        raise ValidationError(f"task type: {refusal}", "task_type")


def unannounced(task_type: str, known: set[str] | None) -> str | None:
    """Why ``task_type`` is refused given the task types the running engines announced (None: they did not say,
    so nothing is refused), with a did-you-mean; None if it is known. Pure."""
    if known is None or task_type in known:
        return None
    force = "give --force to go ahead anyway"
    if not known:
        return f"no running engine announced task type {task_type!r} (none is running?); {force}"
    close = difflib.get_close_matches(task_type, sorted(known), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else f"the running engines handle {_few(sorted(known))}; "
    return f"no running engine handles task type {task_type!r}: {hint}{force}"


def _few(names: list[str], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def paused_rows(found: Iterable[tuple[int, PauseRecord]]) -> list[dict[str, Any]]:
    """One row per paused task type, with the partitions that hold the pause (the newest reason wins). Pure."""
    rows: dict[str, dict[str, Any]] = {}
    for partition, record in sorted(found, key=lambda pr: (pr[1].task_type, pr[1].since, pr[0])):
        row = rows.setdefault(record.task_type, {"task_type": record.task_type, "partitions": []})
        row.update(since_us=record.since, since=shown(record.since), reason=record.reason, by=record.requested_by)
        row["partitions"].append(partition)
    return list(rows.values())


def list_paused(args: argparse.Namespace) -> int:
    """``epochq pause --list``: the paused task types in the projections of the state directory."""
    settings = settings_from(args)
    found: list[tuple[int, PauseRecord]] = []
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            found.extend((p, record) for record in all_paused(store))
    say_freshness(settings)
    rows = paused_rows(found)
    if args.json:
        print_json(rows)
        return 0
    if rows:
        print(f"{'task type':24} {'partitions':>10}  {'paused since (UTC)':24} {'by':12} reason")
    for row in rows:
        print(f"{row['task_type'][:24]:24} {len(row['partitions']):>10}  {row['since']:24} {row['by'][:12]:12} "
              f"{row['reason']}")
    print(f"{len(rows)} paused task type(s)")
    return 0
