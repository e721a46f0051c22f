"""A throwaway redis-server for BullMQ: a free loopback port, no persistence, stopped on exit."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def redis_server(timeout: float = 10.0) -> Iterator[int]:
    """A redis-server on 127.0.0.1 (no RDB, no AOF) for the duration of the block; yields its port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is missing: `make bench-peers` installs it (apt-get install redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="epochq-peers-redis-")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", workdir, "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_pong(port, proc, timeout)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_pong(port: int, proc: subprocess.Popen, timeout: float) -> None:
    """Until the server answers PING, or fail if it exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"redis-server did not answer on port {port} within {timeout:.0f} s")
