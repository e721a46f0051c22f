"""Serving the console with uvicorn: in the foreground (``epochq console``) or on a thread of an engine process."""

from __future__ import annotations

import logging
import os
import socket
import threading

import uvicorn
from starlette.applications import Starlette

from engine.config import Settings
from engine.console.app import create_app
from engine.console.security import ConsoleAccess
from engine.console.web import compile_templates
from engine.errors import ConfigError


def _server(app: Starlette, access: ConsoleAccess) -> uvicorn.Server:
    """A uvicorn server of the console; its own errors stay one line unless EPOCHQ_TRACEBACK=1."""
    if os.environ.get("EPOCHQ_TRACEBACK") != "1":
        for name in ("uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).addHandler(logging.NullHandler())
            logging.getLogger(name).propagate = False
    config = uvicorn.Config(app, host=access.host, port=access.port, log_config=None,
                            access_log=False, server_header=False, lifespan="off", timeout_graceful_shutdown=2)
    return uvicorn.Server(config)


def bind(access: ConsoleAccess) -> socket.socket:
    """The listening socket of the console; ConfigError naming the address when it cannot be bound."""
    family = socket.AF_INET6 if ":" in access.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((access.host, access.port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"console: cannot listen on {access.host}:{access.port}: {e.strerror or e}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings, access: ConsoleAccess, sock: socket.socket | None = None) -> None:
    """Serve on ``sock`` (bound now if not given) until SIGINT or SIGTERM (uvicorn handles both)."""
    sock = sock or bind(access)
    app = create_app(settings, access)
    try:
        _server(app, access).run(sockets=[sock])
    finally:
        app.state.reads.close()


class ConsoleThread:
    """The console on a daemon thread of the calling process: started by ``engine run --console-port``."""

    def __init__(self, settings: Settings, access: ConsoleAccess):
        compile_templates()
        self.app = create_app(settings, access)
        self.server = _server(self.app, access)
        self.socket = bind(access)
        self.thread = threading.Thread(target=self.server.run, args=([self.socket],), name="epochq-console",
                                       daemon=True)

    def start(self, timeout: float = 10.0) -> None:
        """Start serving; returns once the port is bound (or the server gave up)."""
        self.thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout * 20)):
            if self.server.started or not self.thread.is_alive():
                return
            deadline.wait(0.05)

    @property
    def started(self) -> bool:
        """Whether the port is bound and requests are served."""
        return bool(self.server.started)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        self.thread.join(timeout)
        self.socket.close()
        self.app.state.reads.close()
