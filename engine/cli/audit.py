"""``epochq audit --tenant T [--task-type X] [--since ISO] [--until ISO] --format jsonl|csv [--out FILE]``."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable
from contextlib import nullcontext
from typing import IO, Any

from engine.cli.common import add_connection_flags, settings_from, since_us
from engine.questions.logged import event_json
from engine.errors import ConfigError
from engine.questions.audit import AuditedEvent, AuditFilter, AuditSummary, audit_events

CSV_COLUMNS = ("offset", "partition", "time", "job_id", "tenant", "type", "epoch", "owner", "attempt",
               "error", "fenced", "event_id", "traceparent")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` subcommand."""
    parser = sub.add_parser("audit", help="export a tenant's history from the log (JSON lines or CSV)",
                            description="Every event of a tenant's jobs, read from the events topic "
                                        "(through a projection's tenant index where one is at hand), "
                                        "partition by partition in log order.")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--task-type", help="only jobs of this task type")
    parser.add_argument("--since", help="events at or after: 15m, 2h, 1d (that long ago) or ISO-8601 (UTC if no zone)")
    parser.add_argument("--until", help="events before: 15m, 2h, 1d ago or ISO-8601")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    parser.add_argument("--out", help="write to this file instead of stdout")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when stderr is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    add_connection_flags(parser)
    parser.set_defaults(func=_audit)


def _audit(args: argparse.Namespace) -> int:
    flt = AuditFilter(args.tenant, args.task_type, since_us(args.since, "--since"), since_us(args.until, "--until"))
    if flt.since_us is not None and flt.until_us is not None and flt.since_us >= flt.until_us:
        raise ConfigError("--since must be before --until")
    show = sys.stderr.isatty() if args.progress is None else args.progress
    summary = AuditSummary()
    events = audit_events(settings_from(args), flt, summary, _progress_bar if show else None)
    target = open(args.out, "w", encoding="utf-8", newline="") if args.out else nullcontext(sys.stdout)
    try:  # a reader of stdout that went away (`epochq audit ... | head`) ends the command quietly: main's to say
        with target as out:
            (write_csv if args.format == "csv" else write_jsonl)(events, out)
    finally:
        events.close()
    print(f"audit of tenant {args.tenant}: {summary.line()}", file=sys.stderr)
    return 0


def audit_row(audited: AuditedEvent) -> dict[str, Any]:
    """One exported event: ``epochq history --json``'s fields plus ``job_id`` and ``partition``."""
    return {**event_json(audited.logged), "job_id": audited.logged.event.job_id, "partition": audited.partition}


def write_jsonl(events: Iterable[AuditedEvent], out: IO[str]) -> None:
    """One JSON object per line, in the order given."""
    for audited in events:
        out.write(json.dumps(audit_row(audited), ensure_ascii=False, default=str))
        out.write("\n")


def write_csv(events: Iterable[AuditedEvent], out: IO[str]) -> None:
    """A header row, then one row per event with the flat columns of CSV_COLUMNS."""
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for audited in events:
        row = audit_row(audited)
        writer.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])


def _progress_bar(read: int, total: int) -> None:
    pct = 100 if total == 0 else min(100, int(100 * read / total))
    sys.stderr.write(f"\raudit: [{'#' * (pct // 4):25}] {pct:3d}% (offset {read} of {total})")
    if read >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
