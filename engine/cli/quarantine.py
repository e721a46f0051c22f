"""``epochq quarantine list``: the command records that could not be decoded, set aside as events."""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.cli.fresh import say_freshness
from engine.contract import messages as m
from engine.questions.history import events_at
from engine.questions.stores import quarantined


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``quarantine list``."""
    parser = sub.add_parser("quarantine", help="command records set aside because they could not be decoded")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="every quarantined record the state directory's projections know")
    listing.add_argument("--json", action="store_true")
    add_connection_flags(listing)
    listing.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    rows = _rows(settings, quarantined(settings))
    say_freshness(settings)
    if args.json:
        print_json(rows)
        return 0
    print(f"{'partition':>9} {'command offset':>14} {'event offset':>12} {'bytes':>7}  reason")
    for row in rows:
        print(f"{row['partition']:>9} {row['command_offset']:>14} {row['event_offset']:>12} {row['bytes']:>7}  "
              f"{row['error']}")
    print(f"{len(rows)} quarantined record(s) (from the projections of {settings.state_dir})")
    return 0


def _rows(settings: Any, found: list[tuple[int, int, str]]) -> list[dict[str, Any]]:
    """Each quarantined record: where its event is, and the command's own offset and size, read from the event."""
    bodies: dict[tuple[int, int], m.CommandQuarantined] = {}
    for partition in sorted({p for p, _, _ in found}):
        offsets = [(offset, "applied") for p, offset, _ in found if p == partition]
        for logged in events_at(settings, partition, offsets):
            if isinstance(logged.event.body, m.CommandQuarantined):
                bodies[(partition, logged.offset)] = logged.event.body
    return [{"partition": p, "event_offset": offset, "command_offset": getattr(bodies.get((p, offset)), "offset", None),
             "bytes": len(body.raw) if (body := bodies.get((p, offset))) else None, "error": error}
            for p, offset, error in found]
