"""``epochq worker run module:app --pool P``: run the handlers of a remote pool until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal

from engine.app import POOL_NAME
from engine.cli.common import add_connection_flags, settings_from
from engine.cli.engine import load_app
from engine.errors import ConfigError
from engine.runtime.observe.logs import configure_logging


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``worker`` subcommand."""
    parser = sub.add_parser("worker", help="run a remote worker of a pool (docs/workers.md)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="run the attempts dispatched to a pool, with the handlers of module:app")
    run.add_argument("app", help="where the App lives, as module:attribute (e.g. myapp:app)")
    add_connection_flags(run)
    run.add_argument("--pool", default="default",
                     help="the pool this worker serves: task types declared with pool=..., or every task type of "
                          "an engine run with --no-execute (pool 'default')")
    run.add_argument("--concurrency", type=int, default=8, help="attempts run at once (default 8)")
    run.add_argument("--worker-id", help="this worker's name in `epochq workers` (default worker-host-pid)")
    run.add_argument("--grace", type=float, default=10.0, help="seconds running attempts get at shutdown")
    run.add_argument("--log-level", default="INFO")
    run.add_argument("--log-format", choices=["text", "json"], default="text")
    run.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from engine.runtime.remote.worker import Worker

    configure_logging(args.log_level, args.log_format)
    if not POOL_NAME.match(args.pool):
        raise ConfigError(f"--pool: 1-100 letters, digits, '_' or '-', got {args.pool!r}")
    if args.concurrency < 1:
        raise ConfigError(f"--concurrency: a whole number >= 1, got {args.concurrency}")
    worker = Worker(load_app(args.app), settings_from(args), args.pool, args.concurrency, args.worker_id)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop())
    worker.run(args.grace)
    return 0
