"""Entry point of the ``epochq`` command: one subcommand per module, each with ``register``.

Decides how a run ends: the subcommand's status, or one line on stderr and a status that
says what went wrong (docs/cli.md, *Exit status*); never a traceback unless
``EPOCHQ_TRACEBACK=1`` asks for one.
"""

from __future__ import annotations

import argparse
import logging
import importlib
import os
import sys
import traceback
from importlib import metadata
from collections.abc import Sequence

from engine.config import check_reach_with, route_client_logs
from engine.errors import EpochqError, KafkaUnavailableError, NotFoundError
from engine.runtime.reach import check_reachable

SUBCOMMAND_MODULES = ("broker", "topics", "engine", "jobs", "dlq", "projections", "tenants", "policy", "audit",
                      "schedules", "lateness", "acl", "control", "purge", "quarantine", "limits", "catalog",
                      "console", "schemas", "view", "simulate", "worker")
EXIT_NOT_FOUND = 1
"""What was named does not exist (the same status as a job that ended dead, or a refused command)."""
EXIT_ERROR = 2
"""A usage error, a bad value, or anything epochq refused: one line on stderr."""
EXIT_UNREACHABLE = 3
"""The Kafka cluster did not answer in time."""
EXIT_INTERNAL = 70
"""A bug in epochq (an exception it did not expect): one line, and the traceback with EPOCHQ_TRACEBACK=1."""
EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``epochq queues | head``): 128 + SIGPIPE, as a shell reports it."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="epochq", description="Event-sourced job scheduling on Kafka.")
    parser.add_argument("--version", action="version", version=f"epochq {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"engine.cli.{name}").register(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml), or ``unknown`` when run from a bare checkout."""
    try:
        return metadata.version("epochq")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``epochq`` subcommand; errors become one line on stderr and a non-zero status."""
    args = None
    try:
        args = build_parser().parse_args(argv)
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        return _pipe_closed()
    except NotFoundError as e:
        return _fail(str(e), EXIT_NOT_FOUND)
    except KafkaUnavailableError as e:
        login = _refused_login(args) if TRANSPORT_FAILURE in str(e) else None
        if login is not None:
            return _fail(login)
        return _fail(str(e), EXIT_UNREACHABLE)
    except EpochqError as e:
        return _fail(str(e))
    except OSError as e:  # a file named on the command line (--out, --payload @FILE) cannot be used
        return _fail(f"{e.filename}: {e.strerror}" if e.filename else str(e))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the last resort: a bug, reported in one line (a librdkafka error
        # too: the Kafka edge translates every call, engine/runtime/kafka/ports.py, so one that gets here is a bug)
        if os.environ.get("EPOCHQ_TRACEBACK") == "1":
            traceback.print_exc()
        return _fail(f"internal error: {type(e).__name__}: {e} (EPOCHQ_TRACEBACK=1 shows where)", EXIT_INTERNAL)


TRANSPORT_FAILURE = "Broker transport failure"
"""What librdkafka says of a call that reached no broker: a refused login among the causes."""


def _refused_login(args: argparse.Namespace | None) -> str | None:
    """One line when the brokers refuse the configured login (a wrong password, a client certificate they do not
    trust), asked anew; None when they do not (or the set-up has no login)."""
    from engine.cli.common import settings_from
    from engine.runtime.kafka.admin import refused_login

    try:
        settings = settings_from(args) if args is not None else None
    except EpochqError:
        return None
    if settings is None or settings.security_protocol == "PLAINTEXT":
        return None
    why = refused_login(settings)
    if why is None:
        return None
    return (f"the brokers refused the login ({settings.security_summary()}): {why}; check EPOCHQ_SASL_USERNAME and "
            "EPOCHQ_SASL_PASSWORD, or the client certificate (docs/security.md)")


def _quiet_client_logs() -> None:
    """librdkafka's own lines (connection retries, ``%3|…|FAIL|…``) stay out of a command's output.

    ``EPOCHQ_KAFKA_LOGS=1`` shows them on stderr, for debugging a connection.
    """
    logger = logging.getLogger("epochq.librdkafka")
    if os.environ.get("EPOCHQ_KAFKA_LOGS") == "1":
        logging.basicConfig(level=logging.DEBUG, format="%(message)s")
    else:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    route_client_logs(logger)


def _fail(message: str, status: int = EXIT_ERROR) -> int:
    print(f"epochq: error: {message}", file=sys.stderr)
    return status


def _pipe_closed() -> int:
    """Stop writing to a stdout nobody reads, so the interpreter's exit does not complain either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def run() -> int:
    """The ``epochq`` program: :func:`main` in a process of its own, with librdkafka's lines kept quiet
    except under ``engine run`` (an engine logs them with its own). One-shot commands check first that
    the bootstrap answers (one line naming the address within seconds); ``engine run`` waits for it."""
    if sys.argv[1:2] != ["engine"] and sys.argv[1:3] != ["view", "run"]:
        _quiet_client_logs()
        check_reach_with(check_reachable)
    return main()


if __name__ == "__main__":
    sys.exit(run())
