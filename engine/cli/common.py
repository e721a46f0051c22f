"""Flags every subcommand that talks to Kafka shares, and their translation into Settings."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.config import Settings, load_settings
from engine.cli.times import parse_time as parse_time  # the CLI's one time parser, for the subcommands
from engine.cli.times import since_us as since_us
from engine.errors import ValidationError
from engine.questions.tally import Tally

EXIT_NEGATIVE = 1
"""The request ran, and its answer is no: a job ended dead or rejected, a command was refused, a name is unknown."""
EXIT_NOT_DONE = 4
"""``--wait`` ran out: the job has not reached a final state within ``--timeout``."""

MAX_INPUT_BYTES = 64 * 1024 * 1024
"""What ``--payload @file`` or ``-`` reads at most: far over any payload limit, short of exhausting memory."""
PAYLOAD_HELP = "JSON payload: inline text, @FILE, or - for stdin (default {})"


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0 (``--wait``, ``--timeout``); a usage error otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):  # also NaN
        raise argparse.ArgumentTypeError(f"must be seconds >= 0, got {text!r}")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port to listen on, 1 to 65535 (``--port``, ``--metrics-port``); a usage error
    naming the range otherwise."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text!r}")
    return value


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


def refused(subject: str, verdict: Tally) -> bool:
    """Say (on stderr, one line) that partitions refused a command sent to every partition; whether any did.

    A refusal (the signer may not ask for it, docs/security.md; a field out of its rules) is never "already
    paused" or "had this limit already": :mod:`engine.questions.tally` tells them apart."""
    line = verdict.refused
    if line is not None:
        print(f"epochq: {subject}: {line}", file=sys.stderr)
    return line is not None


def print_json(value: Any) -> None:
    """One JSON document on stdout, keys sorted, for scripts."""
    json.dump(value, sys.stdout, sort_keys=True, default=str)
    sys.stdout.write("\n")


def read_payload(text: str) -> Any:
    """The JSON value of a ``--payload`` flag: inline JSON, ``@FILE`` (a file's content) or ``-`` (stdin)."""
    if text == "-":
        raw, source = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1), "stdin"
    elif text.startswith("@"):
        raw, source = _read_file(text[1:]), text
    else:
        raw, source = text.encode(), "the text given"
    if len(raw) > MAX_INPUT_BYTES:
        raise ValidationError(f"payload: {source} is over {MAX_INPUT_BYTES:,} bytes", "payload", "payload_too_large")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ValidationError(f"payload: {source} is not JSON: {e}", "payload") from None


def _read_file(name: str) -> bytes:
    try:
        with Path(name).open("rb") as f:
            return f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise ValidationError(f"payload: cannot read @{name}: {e.strerror or e}", "payload") from None
