"""``epochq schemas list``: every writer schema, shipped with this release or registered in ``<ns>.schemas``."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.runtime.kafka.schemas import SchemaRow, read_schemas, schema_rows, shipped


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``schemas`` subcommand."""
    parser = sub.add_parser("schemas", help="the writer schemas: shipped, and registered in <ns>.schemas")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="fingerprint, subject, version and where each schema appears")
    add_connection_flags(listing)
    listing.add_argument("--json", action="store_true", help="one JSON list (docs/cli.md)")
    listing.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    """Exit 1 when an entry of the log is flagged (its text lacks its key's fingerprint, or is not the shipped copy)."""
    settings = settings_from(args)
    logged = read_schemas(settings)
    rows = schema_rows(shipped(), logged)
    flagged = [r for r in rows if r.problem]
    if args.json:
        print_json([dataclasses.asdict(r) for r in rows])
    else:
        _table(rows, settings.schemas_topic)
    if not logged:
        print(f"{settings.schemas_topic} holds no schema: run `epochq topics ensure` (or start an engine)",
              file=sys.stderr)
    if flagged:
        print(f"{len(flagged)} entr{'y' if len(flagged) == 1 else 'ies'} of {settings.schemas_topic} flagged: a reader "
              "ignores a text without its key's fingerprint; an engine's start (or `epochq topics ensure`) writes "
              "the shipped copy of a shipped key again", file=sys.stderr)
    return 1 if flagged else 0


def _table(rows: list[SchemaRow], topic: str) -> None:
    print(f"{'FINGERPRINT':<16}  {'SUBJECT':<8} {'VERSION':>7}  WHERE")
    for r in rows:
        where = ", ".join(w for w, on in (("shipped", r.shipped), (f"in {topic}", r.in_log)) if on)
        version = f"v{r.version}" if r.version >= 0 else "-"
        flag = f"  !! {r.problem}" if r.problem else ""
        print(f"{r.fingerprint:<16}  {r.subject:<8} {version:>7}  {where}{flag}")
