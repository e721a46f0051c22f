"""``epochq projections rebuild --partition N|--all [--verify]``."""

from __future__ import annotations

import argparse
import sys

from engine.cli.common import add_connection_flags, settings_from
from engine.config import Settings
from engine.errors import StoreLockedError
from engine.runtime.kafka import KafkaLog
from engine.runtime.topics import partition_count
from projections.rebuild import holding, replace_store, verify

LOCKED_EXIT = 3
"""The exit status of a rebuild refused because an engine (or another process) holds a store."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``projections`` subcommand."""
    parser = sub.add_parser("projections", help="rebuild projections from the log, or verify them")
    verbs = parser.add_subparsers(dest="verb", required=True)
    rebuild = verbs.add_parser("rebuild", help="replay events from offset 0 into a fresh store")
    which = rebuild.add_mutually_exclusive_group(required=True)
    which.add_argument("--partition", type=int)
    which.add_argument("--all", action="store_true")
    rebuild.add_argument("--verify", action="store_true",
                         help="rebuild into a temporary store and compare with the live one (read-only, safe while "
                              "engines run); exit 1 on any difference")
    add_connection_flags(rebuild)
    rebuild.set_defaults(func=_rebuild)


def _progress(partition: int, reached: int, end: int) -> None:
    pct = 100 if end == 0 else int(100 * reached / end)
    bar = "#" * (pct // 4)
    sys.stderr.write(f"\rpartition {partition}: [{bar:25}] {pct:3d}% ({reached}/{end})")
    if reached >= end:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _rebuild(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    partitions = [args.partition] if not args.all else list(range(partition_count(settings)))
    with KafkaLog(settings) as log:
        return _verify(log, settings, partitions) if args.verify else _replace(log, settings, partitions)


def _replace(log: KafkaLog, settings: Settings, partitions: list[int]) -> int:
    try:
        with holding(settings, partitions):  # all or none: --all rebuilds nothing if one store is held
            for p in partitions:
                applied = replace_store(log, settings, p, _progress)
                print(f"partition {p}: rebuilt up to offset {applied}")
    except StoreLockedError as e:
        print(f"epochq: refused: {e}; stop it first (--verify reads without the lock and works meanwhile)",
              file=sys.stderr)
        return LOCKED_EXIT
    return 0


def _verify(log: KafkaLog, settings: Settings, partitions: list[int]) -> int:
    failures = 0
    for p in partitions:
        result = verify(log, settings, p, _progress)
        verdict = "match" if result.matches else "DIFFER"
        print(f"partition {p}: {verdict} ({result.keys_compared} keys, applied offset {result.applied_offset})")
        for label, keys in (("only live", result.only_live), ("only rebuilt", result.only_rebuilt),
                            ("different", result.different)):
            for key in keys[:10]:
                print(f"  {label}: {key!r}")
        failures += not result.matches
    return 1 if failures else 0
