"""``epochq view run|status|rebuild``: the view that answers every question, for every partition."""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.errors import StoreLockedError

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def keep_finished(text: str) -> float:
    """An argparse type: ``--keep-finished`` as seconds, from days (``30``) or ``90s``/``15m``/``12h``/``30d``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected days (30) or a duration (12h, 90s), got {text!r}")
    return float(match.group(1)) * UNITS[match.group(2) or "d"]


def add_keep_finished(parser: argparse.ArgumentParser, flag: str = "--keep-finished") -> None:
    """The view's retention flag (``view run``, ``engine run``, ``console`` share it)."""
    parser.add_argument(flag, dest="keep_finished", type=keep_finished, default=keep_finished("30d"),
                        metavar="DURATION",
                        help="how long completed and cancelled jobs stay in the view: days, or 90s/15m/12h/30d "
                             "(default 30 days; 0 keeps them forever); dead letters stay until replayed or purged")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``view`` subcommand."""
    parser = sub.add_parser("view", help="the view: every partition folded into stores that answer questions")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="fold every partition of the events topic into this state directory's view")
    add_connection_flags(run)
    add_keep_finished(run)
    run.add_argument("--log-level", default="INFO")
    run.add_argument("--log-format", choices=["text", "json"], default="text")
    run.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    run.set_defaults(func=_run)
    status = verbs.add_parser("status", help="the view's lag behind the log, per partition")
    add_connection_flags(status)
    status.add_argument("--json", action="store_true", help="one JSON document")
    status.set_defaults(func=_status)
    rebuild = verbs.add_parser("rebuild", help="fold the log from offset 0 into a fresh view and compare or replace")
    add_connection_flags(rebuild)
    add_keep_finished(rebuild)
    rebuild.add_argument("--verify", action="store_true",
                         help="rebuild beside the view (read-only, safe while it runs) and compare; exit 1 on any "
                              "difference")
    rebuild.set_defaults(func=_rebuild)


def _run(args: argparse.Namespace) -> int:
    from engine.runtime.observe.logs import configure_logging
    from engine.runtime.view.process import run_view

    configure_logging(args.log_level, args.log_format)
    try:
        run_view(settings_from(args), args.keep_finished, args.parent_pid)
    except StoreLockedError as e:
        if args.parent_pid is None:
            raise
        logging.getLogger("epochq.view").info("view: %s; not starting another", e)  # another engine's, just now
    return 0


def _status(args: argparse.Namespace) -> int:
    from engine.questions.view_status import view_status

    status = view_status(settings_from(args))
    now_us = int(time.time() * 1e6)
    if args.json:
        print_json(status.as_json(now_us))
        return 0
    who = f"folded by {status.holder}" if status.holder else "no view process runs there"
    print(f"view {status.directory}: {who}; {status.lag} record(s) behind the log; {status.ignored_line()}")
    print(f"{'PARTITION':>9} {'END':>10} {'APPLIED':>10} {'LAG':>8} {'NEWEST EVENT AGE':>17} {'IGNORED':>8}")
    for p in status.partitions:
        age = p.age_s(now_us)
        shown = "-" if age is None else f"{age:.1f}s"
        print(f"{p.partition:>9} {p.end_offset:>10} {p.applied_offset:>10} {p.lag:>8} {shown:>17} {p.ignored:>8}")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    from engine.runtime.view.rebuild import rebuild_view, verify_view

    settings = settings_from(args)
    if not args.verify:
        applied = rebuild_view(settings, args.keep_finished)
        print(f"view rebuilt: {len(applied)} partition(s), " +
              ", ".join(f"p{p}@{o}" for p, o in sorted(applied.items())))
        return 0
    worst = 0
    for result in verify_view(settings, args.keep_finished):
        verdict = "matches" if result.matches else (
            f"DIFFERS: {len(result.only_live)} only in the view, {len(result.only_rebuilt)} only in the rebuild, "
            f"{len(result.different)} different")
        print(f"partition {result.partition}: {result.keys_compared} keys up to offset {result.applied_offset}: "
              f"{verdict}")
        worst = max(worst, 0 if result.matches else 1)
    if worst:
        print("epochq: the view differs from a rebuild of the log", file=sys.stderr)
    return worst
