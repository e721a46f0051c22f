"""``epochq lateness [--task-type X] [--since ISO] [--json]``: how late jobs started, per task type, from the log."""

from __future__ import annotations

import argparse

from engine.cli.common import add_connection_flags, print_json, settings_from, since_us
from engine.questions.lateness import QUANTILES, report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``lateness`` subcommand."""
    parser = sub.add_parser("lateness", help="start lateness per task type: p50/p95/p99/p99.9, from the log",
                            description="For every JobStarted in the events topic: started at minus due at. "
                                        "Exact percentiles (nearest rank) per task type.")
    parser.add_argument("--task-type", help="only this task type")
    parser.add_argument("--since", help="attempts started at or after: 15m, 2h, 1d (that long ago) or ISO-8601 "
                                         "(UTC if no zone)")
    parser.add_argument("--json", action="store_true")
    add_connection_flags(parser)
    parser.set_defaults(func=_lateness)


def _lateness(args: argparse.Namespace) -> int:
    rows = report(settings_from(args), args.task_type, since_us(args.since, "--since"))
    if args.json:
        print_json([row.as_json() for row in rows])
        return 0
    if not rows:
        print("no started attempts")
        return 1
    heads = "".join(f"{'p' + format(q, 'g'):>10}" for q in QUANTILES)
    print(f"{'task type':24} {'attempts':>9}{heads}{'max':>10}   (ms)")
    for row in rows:
        cells = "".join(f"{row.quantiles[q] / 1000:10.1f}" for q in QUANTILES)
        print(f"{row.task_type[:24]:24} {row.count:9d}{cells}{row.max_us / 1000:10.1f}")
    return 0
