"""``epochq schemas list``: every writer schema, shipped with this release or registered in ``<ns>.schemas``."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from engine.cli.common import add_connection_flags, print_json, settings_from
from engine.runtime.kafka.schemas import read_schemas, schema_rows, shipped


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``schemas`` subcommand."""
    parser = sub.add_parser("schemas", help="the writer schemas: shipped, and registered in <ns>.schemas")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="fingerprint, subject, version and where each schema appears")
    add_connection_flags(listing)
    listing.add_argument("--json", action="store_true", help="one JSON list (docs/cli.md)")
    listing.set_defaults(func=_list)


def _list(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    logged = read_schemas(settings)
    rows = schema_rows(shipped(), logged)
    if args.json:
        print_json([dataclasses.asdict(r) for r in rows])
        return 0
    print(f"{'FINGERPRINT':<16}  {'SUBJECT':<8} {'VERSION':>7}  WHERE")
    for r in rows:
        where = ", ".join(w for w, on in (("shipped", r.shipped), (f"in {settings.schemas_topic}", r.in_log)) if on)
        version = f"v{r.version}" if r.version >= 0 else "-"
        print(f"{r.fingerprint:<16}  {r.subject:<8} {version:>7}  {where}")
    if not logged:
        print(f"{settings.schemas_topic} holds no schema: run `epochq topics ensure` (or start an engine)",
              file=sys.stderr)
    return 0
