"""Entry point of the ``epochq`` command: one subcommand per module, each with ``register``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from confluent_kafka import KafkaException

from engine.errors import EpochqError

SUBCOMMAND_MODULES = ("broker", "topics", "engine", "jobs", "dlq", "projections", "tenants", "policy", "audit",
                      "schedules", "lateness", "acl")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="epochq", description="Event-sourced job scheduling on Kafka.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"engine.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``epochq`` subcommand; errors become one line on stderr and exit status 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except EpochqError as e:
        print(f"epochq: error: {e}", file=sys.stderr)
        return 2
    except KafkaException as e:  # one not translated where it entered: still one line, not a traceback
        print(f"epochq: error: kafka: {e.args[0].str() if e.args else e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
