"""Flags every subcommand that talks to Kafka shares, and their translation into Settings."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from engine.config import Settings, load_settings


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """--bootstrap, --namespace and --state-dir, each defaulting to its EPOCHQ_* variable."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env EPOCHQ_BOOTSTRAP; default: the local broker)")
    parser.add_argument("--namespace", help="topic prefix (env EPOCHQ_NAMESPACE; default epochq)")
    parser.add_argument("--state-dir", help="projection directory (env EPOCHQ_STATE_DIR)")


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the parsed flags over the environment."""
    return load_settings(
        bootstrap=getattr(args, "bootstrap", None),
        namespace=getattr(args, "namespace", None),
        state_dir=getattr(args, "state_dir", None),
    )


def print_json(value: Any) -> None:
    """One JSON document on stdout, keys sorted, for scripts."""
    json.dump(value, sys.stdout, sort_keys=True, default=str)
    sys.stdout.write("\n")
