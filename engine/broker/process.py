"""Broker JVM processes: ports, storage formatting, launching, liveness and signals.

This is the only module of ``engine.broker`` that spawns or signals processes.
"""

from __future__ import annotations

import base64
import errno
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from engine.broker.config import HOST, NodeSpec, render_server_properties
from engine.broker.errors import BrokerStartError, JavaNotFoundError, PortInUseError
from engine.broker.fetch import JAVA_HINT
from engine.broker.state import NodeInfo

__all__ = [
    "allocate_ports",
    "check_java",
    "find_broker_pid",
    "first_error",
    "format_storage",
    "launch",
    "log_tail",
    "new_cluster_id",
    "pid_alive",
    "prepare_node_dir",
    "signal_and_wait",
]

MIN_JAVA = 17
FORMAT_TIMEOUT_S = 120.0
TOOL_JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

# Popen handles of JVMs this Python process started, so dead children get reaped.
_children: dict[int, subprocess.Popen[bytes]] = {}


def check_java(java: str) -> int:
    """Return the major version of ``java``; raise if it cannot run Kafka 4.x."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(f"`{java} -version` failed ({e}): {JAVA_HINT}") from e
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise JavaNotFoundError(f"java {major or '?'} found, Kafka 4.4 needs {MIN_JAVA}+: {JAVA_HINT}")
    return major


def new_cluster_id() -> str:
    """Return a random Kafka cluster id (base64url of 16 bytes, as ``StorageTool random-uuid``)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def allocate_ports(count: int, first_port: int | None = None) -> list[int]:
    """Pick ``count`` distinct free ports on 127.0.0.1.

    With ``first_port`` the ports are ``first_port, first_port+1, ...`` and each must be
    free, else :class:`PortInUseError`.
    """
    if first_port is not None:
        fixed = list(range(first_port, first_port + count))
        for port in fixed:
            _check_port_free(port)
        return fixed
    ports: list[int] = []
    while len(ports) < count:
        port = _free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                raise PortInUseError(
                    f"port {HOST}:{port} is already in use: choose another with --port, "
                    "or omit --port to pick free ports"
                ) from e
            raise


def prepare_node_dir(node: NodeSpec, cluster: Sequence[NodeSpec], node_dir: Path,
                     secure: Mapping[str, str] | None = None) -> None:
    """Create ``node_dir`` with its ``server.properties`` (mode 0600: it may hold a password) and log4j2 file."""
    (node_dir / "logs").mkdir(parents=True, exist_ok=True)
    config = node_dir / "server.properties"
    config.touch(mode=0o600)
    config.write_text(render_server_properties(node, cluster, secure))
    log4j = resources.files("engine.broker") / "log4j2.properties"
    (node_dir / "log4j2.properties").write_text(log4j.read_text())


def format_storage(java: str, libs: Path, node_dirs: Sequence[Path], cluster_id: str,
                   extra_args: Sequence[str] = ()) -> None:
    """Format every node's storage with ``cluster_id`` (the StorageTool JVMs run in parallel).

    ``extra_args``: more ``format`` arguments, e.g. ``--add-scram`` for a secure broker's users.
    """
    procs = [_start_format(java, libs, d, cluster_id, extra_args) for d in node_dirs]
    for proc, node_dir in zip(procs, node_dirs):
        try:
            out, _ = proc.communicate(timeout=FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            tail = "\n".join((out or "").splitlines()[-30:])
            raise BrokerStartError(
                f"formatting storage in {node_dir} failed (exit {proc.returncode})", detail=tail
            )


def _start_format(java: str, libs: Path, node_dir: Path, cluster_id: str,
                  extra_args: Sequence[str]) -> subprocess.Popen[str]:
    cmd = [
        java, *TOOL_JVM_FLAGS, *_log_flags(node_dir), "-cp", f"{libs}/*", STORAGE_TOOL,
        "format", "-t", cluster_id, "-c", str(node_dir / "server.properties"), *extra_args,
    ]
    return subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=node_dir,
    )


def _log_flags(node_dir: Path) -> list[str]:
    return [
        f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={node_dir / 'logs'}",
    ]


def launch(java: str, libs: Path, node_dir: Path, heap_mb: int) -> int:
    """Start one broker JVM detached from our session; return its pid."""
    cmd = [
        java, f"-Xmx{heap_mb}m", f"-Xms{min(heap_mb, 256)}m", "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true", *_log_flags(node_dir),
        "-cp", f"{libs}/*", BROKER_MAIN, str(node_dir / "server.properties"),
    ]
    with open(node_dir / "console.log", "ab") as console:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
            cwd=node_dir, start_new_session=True, close_fds=True,
        )
    _children[proc.pid] = proc
    return proc.pid


def pid_alive(pid: int, config_path: Path | None = None) -> bool:
    """Decide whether ``pid`` is a live (non-zombie) process, and our broker if ``config_path``."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process reusing the pid
    return _proc_matches(pid, config_path)


def _proc_matches(pid: int, config_path: Path | None) -> bool:
    proc = Path(f"/proc/{pid}")
    if not proc.is_dir():
        return True  # no procfs (e.g. macOS): trust the signal check
    try:
        stat = (proc / "stat").read_text()
        cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    if not cmdline.strip("\0") and pid in _children:
        return True  # launched a moment ago: the command line shows up once exec is done
    return config_path is None or str(config_path) in cmdline


def find_broker_pid(config_path: Path) -> int | None:
    """Find the live broker JVM started with ``config_path``, whoever started it; ``None`` if none.

    The recorded pid is lost when a node is restarted by other means (a script, by hand):
    the node's ``server.properties`` path, last argument of its command line, still names it.
    """
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return None
    for entry in proc_root.iterdir():
        if entry.name.isdigit() and _is_broker_of(entry, config_path):
            return int(entry.name)
    return None


def _is_broker_of(entry: Path, config_path: Path) -> bool:
    try:
        args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    if BROKER_MAIN not in args or str(config_path) not in args:
        return False
    return pid_alive(int(entry.name), config_path)


def signal_and_wait(nodes: Iterable[NodeInfo], hard: bool = False, timeout: float = 30.0) -> None:
    """Stop ``nodes``: SIGTERM (or SIGKILL if ``hard``), wait up to ``timeout``, then SIGKILL."""
    alive = [n for n in nodes if pid_alive(n.pid, n.config_path)]
    _send(alive, signal.SIGKILL if hard else signal.SIGTERM)
    remaining = _wait_gone(alive, timeout)
    if remaining:
        _send(remaining, signal.SIGKILL)
        _wait_gone(remaining, 10.0)


def _send(nodes: Iterable[NodeInfo], sig: signal.Signals) -> None:
    for node in nodes:
        try:
            os.kill(node.pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(nodes: Sequence[NodeInfo], timeout: float) -> list[NodeInfo]:
    deadline = time.monotonic() + timeout
    alive = list(nodes)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [n for n in alive if pid_alive(n.pid, n.config_path)]
    return alive


def log_tail(node: NodeInfo, lines: int = 30) -> str:
    """Return the last ``lines`` lines of the node's ``server.log`` (else its console output)."""
    for path in (node.log_dir / "server.log", node.console_log):
        text = _tail(path, lines)
        if text.strip():
            return f"--- last lines of {path} ---\n{text}"
    return f"(no log output in {node.node_dir})"


def first_error(node: NodeInfo) -> str | None:
    """Return the first ERROR message the node logged (timestamp stripped), if any."""
    for path in (node.log_dir / "server.log", node.console_log):
        try:
            with open(path, errors="replace") as handle:
                for line in handle:
                    if "] ERROR " in line or line.startswith(("Error:", "Exception in thread")):
                        return line.split("] ERROR ", 1)[-1].strip()[:300]
        except OSError:
            continue
    return None


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            data = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
