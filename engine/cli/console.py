"""``epochq console``: the web console on 127.0.0.1 (docs/console.md)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from engine.cli.common import add_connection_flags, settings_from
from engine.cli.common import port as tcp_port
from engine.cli.view import add_keep_finished

if TYPE_CHECKING:
    from engine.config import Settings
    from engine.console.security import ConsoleAccess

TOKEN_ENV = "EPOCHQ_CONSOLE_TOKEN"
CONSOLE_FLAGS = ("--console-port", "--console-host", "--console-token")
"""``engine run``'s console flags that take a value (``--console-read-only`` takes none)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``console`` subcommand."""
    parser = sub.add_parser("console", help="the web console: jobs, dead letters, schedules, tenants, workers")
    add_console_flags(parser, "--port", "--host", "--token", "--read-only", default_port=8080)
    add_connection_flags(parser)
    parser.add_argument("--no-view", action="store_true",
                        help="start no view when the state directory has none (its pages stay empty until one runs)")
    add_keep_finished(parser)
    parser.set_defaults(func=_run)


def add_console_flags(parser: argparse.ArgumentParser, port: str, host: str, token: str, read_only: str,
                      default_port: int | None) -> None:
    """The console's flags under the given names (``console`` and ``engine run --console-*`` share them)."""
    parser.add_argument(port, type=tcp_port, default=default_port, help="port the console serves (1-65535)")
    parser.add_argument(host, default="127.0.0.1",
                        help="address it binds (default 127.0.0.1); any other needs a token")
    parser.add_argument(token, default=None,
                        help=f"token asked of every request, as basic-auth password or bearer (env {TOKEN_ENV})")
    parser.add_argument(read_only, action="store_true", help="show everything, act on nothing (POSTs refused)")


def console_access(port: int, host: str, token: str | None, read_only: bool) -> ConsoleAccess:
    """The console's security settings from its flags (the token from the environment when not given)."""
    from engine.console.security import ConsoleAccess

    return ConsoleAccess(host, port, token or os.environ.get(TOKEN_ENV) or None, read_only)


def _run(args: argparse.Namespace) -> int:
    from engine.console.server import bind, serve

    access = console_access(args.port, args.host, args.token, args.read_only)
    settings = settings_from(args)
    sock = bind(access)
    mode = ", read-only" if access.read_only else ""
    print(f"epochq console: http://{args.host}:{args.port}/ (state dir {settings.state_dir}{mode}; Ctrl-C stops it)",
          flush=True)
    with started_view(args, settings, quiet=True):
        serve(settings, access, sock)
    return 0


@contextmanager
def started_view(args: argparse.Namespace, settings: Settings, quiet: bool = False) -> Iterator[None]:
    """A view of the state directory in a child process while the block runs, unless ``--no-view`` or one runs
    there already; ``quiet``: its log lines at WARNING and above only (a console's terminal)."""
    if args.no_view:
        yield
        return
    from engine.runtime.view.process import ViewKeeper

    keeper = ViewKeeper(settings, args.keep_finished, "WARNING" if quiet else getattr(args, "log_level", "INFO"))
    keeper.start()
    try:
        yield
    finally:
        keeper.stop()


@contextmanager
def started_console(args: argparse.Namespace, settings: Settings) -> Iterator[None]:
    """The console on a thread of this process while the block runs, when ``--console-port`` asks for one."""
    if args.console_port is None:
        yield
        return
    from engine.console.server import ConsoleThread

    access = console_access(args.console_port, args.console_host, args.console_token, args.console_read_only)
    console = ConsoleThread(settings, access)  # binds the port here: ConfigError when it cannot
    console.start()
    logging.getLogger("epochq.console").info("console on http://%s:%d/%s", access.host, access.port,
                                             " (read-only)" if access.read_only else "")
    try:
        yield
    finally:
        console.stop()
