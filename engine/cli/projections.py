"""``epochq projections rebuild --partition N|--all [--verify]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable

from engine.cli.common import add_connection_flags, settings_from
from engine.config import Settings
from engine.errors import StoreLockedError, ValidationError
from engine.runtime.kafka import KafkaLog
from engine.runtime.topics import partition_count
from engine.runtime.rebuilds import default_workers, rebuild_each, verify_each
from projections.rebuild import Verification, holding, replace_store, verify
from projections.store import owner_partitions

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
    rebuild.add_argument("--parallel", type=_workers, metavar="N",
                         help="with --all: partitions rebuilt at once, one process each (default: the number of cores)")
    add_connection_flags(rebuild)
    rebuild.set_defaults(func=_rebuild)


def _progress(partition: int, reached: int, end: int) -> None:
    pct = 100 if end == 0 else int(100 * reached / end)
    bar = "#" * (pct // 4)
    sys.stderr.write(f"\rpartition {partition}: [{bar:25}] {pct:3d}% ({reached}/{end})")
    if reached >= end:
        sys.stderr.write("\n")
    sys.stderr.flush()


class _Overall:
    """One progress bar over every partition, drawn when it moves."""

    def __init__(self, label: str):
        self.label, self.shown, self.open = label, -1, False  # open: a bar is drawn on a line not ended yet

    def __call__(self, reached: int, total: int) -> None:
        if reached == self.shown:
            return
        self.shown = reached
        pct = 100 if total == 0 else int(100 * reached / total)
        sys.stderr.write(f"\r{self.label}: [{'#' * (pct // 4):25}] {pct:3d}% ({reached:,}/{total:,} offsets)")
        self.open = reached < total
        if not self.open:
            sys.stderr.write("\n")
        sys.stderr.flush()

    def clear(self) -> None:
        """Wipe a bar that is drawn (a partition's result is printed on its own line; the next move draws it again)."""
        if self.open:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.open = False


def _workers(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of processes ≥ 1, got {text!r}")
    return int(text)


def _rebuild(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    count = partition_count(settings)
    if not args.all and not 0 <= args.partition < count:
        raise ValidationError(f"--partition: {settings.events_topic} has partitions 0-{count - 1}, "
                              f"not {args.partition}", "partition")
    partitions = [args.partition] if not args.all else list(range(count))
    workers = args.parallel or default_workers(len(partitions))
    workers = workers if len(partitions) > 1 else 1
    if args.verify:
        present = _present(settings, partitions) if args.all else partitions
        return _checked(settings, present, workers) if present else 1
    try:
        with holding(settings, partitions):  # all or none: --all rebuilds nothing if one store is held
            return _replaced(settings, partitions, workers)
    except StoreLockedError as e:
        print(f"epochq: refused: {e}; stop it first (--verify reads without the lock and works meanwhile)",
              file=sys.stderr)
        return LOCKED_EXIT


def _present(settings: Settings, partitions: list[int]) -> list[int]:
    """The partitions of ``partitions`` with a store in the state directory (what ``--all --verify`` can compare);
    the rest named on stderr, as left out (their stores are on another machine)."""
    here = owner_partitions(settings.state_dir, settings.namespace)
    missing = [p for p in partitions if p not in here]
    if missing and len(missing) < len(partitions):
        print(f"epochq: partition(s) {','.join(map(str, missing))} have no store in {settings.state_dir}: "
              "not verified", file=sys.stderr)
    elif missing:
        print(f"epochq: no store of {settings.namespace} in {settings.state_dir}: nothing to verify", file=sys.stderr)
    return [p for p in partitions if p in here]


def _replaced(settings: Settings, partitions: list[int], workers: int) -> int:
    return _each_partition(settings, partitions, workers, "rebuild")


def _checked(settings: Settings, partitions: list[int], workers: int) -> int:
    return _each_partition(settings, partitions, workers, "verify")


def _each_partition(settings: Settings, partitions: list[int], workers: int, label: str) -> int:
    """Rebuild (or verify) every partition: ``workers`` processes at once, or one after the other here."""
    if workers > 1:
        print(f"{label}: {len(partitions)} partitions, {workers} at a time", file=sys.stderr)
        each, bar = rebuild_each if label == "rebuild" else verify_each, _Overall(label)
        return _report(each(settings, partitions, workers, bar), bar.clear)
    step = replace_store if label == "rebuild" else verify
    with KafkaLog(settings) as log:
        return _report((p, step(log, settings, p, _progress)) for p in partitions)


def _report(results: Iterable[tuple[int, int | Verification]], before: Callable[[], None] = lambda: None) -> int:
    """Print each partition's result as it comes (``before`` each: the progress bar is wiped); 1 if any differs."""
    failures = 0
    for p, result in results:
        before()
        if isinstance(result, int):
            print(f"partition {p}: rebuilt up to offset {result}")
        else:
            failures += _print_verification(p, result)
    return 1 if failures else 0


def _print_verification(p: int, result: Verification) -> bool:
    """Print one partition's verdict (and up to 10 keys of each difference); whether it differs."""
    verdict = "match" if result.matches else "DIFFER"
    print(f"partition {p}: {verdict} ({result.keys_compared} keys, applied offset {result.applied_offset})")
    for label, keys in (("only live", result.only_live), ("only rebuilt", result.only_rebuilt),
                        ("different", result.different)):
        for key in keys[:10]:
            print(f"  {label}: {key!r}")
    return not result.matches
