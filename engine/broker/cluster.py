"""Start, stop and inspect the local Kafka cluster recorded in the broker state file.

``start`` is idempotent: a live cluster recorded in the state file is returned as is;
a stale record (no live pid) is cleaned up first.  Each fresh start formats new storage.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from engine.broker import process
from engine.broker.config import HOST, NodeSpec
from engine.broker.errors import BrokerAlreadyRunningError, BrokerExitedError, BrokerNotRunningError
from engine.broker.fetch import ensure_jars, require_java
from engine.broker.ready import wait_node_ready, wait_ready
from engine.broker.secure import ADMIN, SecureSetup, make_secure_setup, server_settings
from engine.broker.state import (
    BrokerInfo,
    NodeInfo,
    broker_home,
    data_root,
    load_state,
    remove_state,
    save_state,
    state_path,
)
from engine.errors import ConfigError

__all__ = [
    "BrokerStatus",
    "NodeStatus",
    "bootstrap_from_state",
    "restart_node",
    "secure_dir_from_state",
    "start",
    "status",
    "stop",
    "stop_node",
]

DEFAULT_TIMEOUT_S = 90.0
HEAP_MB = {1: 512, 3: 384}


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """Whether one recorded node's JVM is alive."""

    node_id: int
    pid: int
    port: int
    alive: bool


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """What the state file says is running, checked against live pids."""

    running: bool
    bootstrap: str | None
    nodes: tuple[NodeStatus, ...]
    state_file: Path
    secure_dir: Path | None = None


def start(
    nodes: int = 1,
    *,
    port: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    home: Path | str | None = None,
    secure: bool = False,
) -> BrokerInfo:
    """Start a local KRaft cluster of ``nodes`` (1 or 3) nodes, or return the running one.

    ``port`` fixes the client port of node 1 (nodes 2 and 3 use the next ports).
    ``secure``: clients connect with SASL_SSL (SCRAM-SHA-512) and the standard authorizer
    is on (:mod:`engine.broker.secure`); ``info.secure_dir`` says where the credentials are.
    Blocks until every broker is listed by the cluster metadata, at most ``timeout`` s.
    """
    if nodes not in HEAP_MB:
        raise ConfigError(f"nodes must be 1 or 3, not {nodes}")
    root = broker_home(home)
    with _home_lock(root):
        existing = _live_state(root)
        if existing is not None:
            return _reuse(existing, nodes, secure)
        return _start_with_retries(nodes, port, timeout, root, secure)


def _start_with_retries(nodes: int, port: int | None, timeout: float, root: Path, secure: bool,
                        attempts: int = 3) -> BrokerInfo:
    """Start; if a node exits during start and the ports were ours to pick, try again with new ones.

    Free ports are found by binding port 0 and closing it, so on a busy machine another
    process (a client's outgoing connection) can take one before the JVM binds it.
    """
    for _ in range(attempts - 1):
        try:
            return _start_fresh(nodes, port, timeout, root, secure)
        except BrokerExitedError:
            if port is not None:
                raise
            _forget(root, keep_data=False)
    return _start_fresh(nodes, port, timeout, root, secure)  # the last try: its error is the caller's


def stop(*, home: Path | str | None = None, keep_data: bool = False, timeout: float = 30.0) -> bool:
    """Stop every recorded node (SIGTERM, then SIGKILL after ``timeout``); True if any was alive."""
    root = broker_home(home)
    with _home_lock(root):
        info = _located(load_state(root))
        alive = info is not None and any(_alive(n) for n in info.nodes)
        if info is not None:
            process.signal_and_wait(info.nodes, timeout=timeout)
        _forget(root, keep_data)
        return alive


def stop_node(
    node_id: int, *, hard: bool = False, home: Path | str | None = None, timeout: float = 30.0
) -> NodeInfo:
    """Stop one node of the running cluster (SIGKILL if ``hard``); the others keep running."""
    _, node = _recorded_node(load_state(home), node_id, home)
    process.signal_and_wait([_locate(node)], hard=hard, timeout=timeout)
    return node


def restart_node(
    node_id: int,
    *,
    hard: bool = False,
    home: Path | str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> NodeInfo:
    """Stop node ``node_id`` (SIGKILL if ``hard``) and start it again on its config and data.

    The state file records the new pid.  A node that is already down is just started.
    Blocks until the node answers metadata requests, at most ``timeout`` s.
    """
    root = broker_home(home)
    with _home_lock(root):
        info, old = _recorded_node(load_state(root), node_id, root)
        process.signal_and_wait([_locate(old)], hard=hard, timeout=30.0)
        pid = process.launch(require_java(), ensure_jars(), old.node_dir, HEAP_MB[len(info.nodes)])
        new = replace(old, pid=pid)
        save_state(replace(info, nodes=tuple(new if n.node_id == node_id else n for n in info.nodes)))
    wait_node_ready(new, _admin_client(info), timeout)
    return new


def _admin_client(info: BrokerInfo) -> dict[str, str]:
    """librdkafka settings of the broker's admin: PLAINTEXT, or the secure broker's admin user from its env file."""
    if info.secure_dir is None:
        return {"bootstrap.servers": info.bootstrap}
    env_file = info.secure_dir / "users" / f"{ADMIN}.env"
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    return {"bootstrap.servers": info.bootstrap, "security.protocol": env["EPOCHQ_SECURITY_PROTOCOL"],
            "sasl.mechanism": env["EPOCHQ_SASL_MECHANISM"], "sasl.username": env["EPOCHQ_SASL_USERNAME"],
            "sasl.password": env["EPOCHQ_SASL_PASSWORD"], "ssl.ca.location": env["EPOCHQ_SSL_CA_FILE"]}


def _recorded_node(
    info: BrokerInfo | None, node_id: int, home: Path | str | None
) -> tuple[BrokerInfo, NodeInfo]:
    """The recorded cluster and its node ``node_id``; a one-line error if there is no broker or no such node."""
    if info is None:
        raise BrokerNotRunningError(
            f"no local broker recorded in {state_path(home)}: start one with `epochq broker start`"
        )
    return info, info.node(node_id)


def status(*, home: Path | str | None = None) -> BrokerStatus:
    """Report the recorded nodes and whether each pid is alive."""
    info = _located(load_state(home))
    nodes = tuple(
        NodeStatus(n.node_id, n.pid, n.port, _alive(n)) for n in (info.nodes if info else ())
    )
    running = any(n.alive for n in nodes)
    bootstrap = info.bootstrap if info is not None else None
    return BrokerStatus(running, bootstrap, nodes, state_path(home), info.secure_dir if info is not None else None)


def bootstrap_from_state(home: Path | str | None = None) -> str | None:
    """Return the bootstrap address of the running local broker, or ``None``."""
    info = _located(load_state(home))
    if info is None or not any(_alive(n) for n in info.nodes):
        return None
    return info.bootstrap


def secure_dir_from_state(home: Path | str | None = None) -> Path | None:
    """Where the running local broker's credentials are, if it is a secure one; else ``None``."""
    info = load_state(home)
    if info is None or not any(_alive(n) for n in info.nodes):
        return None
    return info.secure_dir


def _alive(node: NodeInfo) -> bool:
    return process.pid_alive(node.pid, node.config_path)


def _locate(node: NodeInfo) -> NodeInfo:
    """``node`` with the pid of its live JVM, even one restarted by other means than ours."""
    if _alive(node):
        return node
    found = process.find_broker_pid(node.config_path)
    return node if found is None else replace(node, pid=found)


def _located(info: BrokerInfo | None) -> BrokerInfo | None:
    """``info`` with every node's live pid (see :func:`_locate`)."""
    return None if info is None else replace(info, nodes=tuple(_locate(n) for n in info.nodes))


def _live_state(root: Path) -> BrokerInfo | None:
    info = _located(load_state(root))
    if info is None or any(_alive(n) for n in info.nodes):
        return info
    _forget(root, keep_data=False)  # stale: every recorded pid is dead
    return None


def _reuse(info: BrokerInfo, nodes: int, secure: bool) -> BrokerInfo:
    if len(info.nodes) != nodes or (info.secure_dir is not None) != secure:
        shape = f"{len(info.nodes)}-node {'secure' if info.secure_dir else 'PLAINTEXT'}"
        raise BrokerAlreadyRunningError(
            f"a {shape} local broker is already running at {info.bootstrap}: run `epochq broker stop` first"
        )
    return info


def _start_fresh(nodes: int, port: int | None, timeout: float, root: Path, secure: bool) -> BrokerInfo:
    specs = _node_specs(nodes, port, data_root(root), secure)
    java = require_java()
    process.check_java(java)
    libs = ensure_jars()
    cluster_id, setup = _prepare(specs, java, libs, data_root(root), secure)
    launched: list[NodeInfo] = []
    try:
        for spec in specs:
            pid = process.launch(java, libs, _node_dir(spec), HEAP_MB[nodes])
            launched.append(_node_info(spec, pid))
        info = BrokerInfo(_bootstrap(specs), cluster_id, tuple(launched), root, setup.directory if setup else None)
        save_state(info)
        client = setup.client_config(ADMIN, info.bootstrap) if setup else {"bootstrap.servers": info.bootstrap}
        wait_ready(client, info.nodes, timeout)
        if setup is not None:
            setup.write_env_files(info.bootstrap, ",".join(f"{HOST}:{s.tls_port}" for s in specs))
        return info
    except BaseException:
        process.signal_and_wait(launched, hard=True)
        remove_state(root)
        raise


def _node_specs(nodes: int, port: int | None, root: Path, secure: bool = False) -> list[NodeSpec]:
    """Ports and directories of each node: a client port, a controller port, and if ``secure`` an mTLS port."""
    client_ports = process.allocate_ports(nodes, port)
    more = [p for p in process.allocate_ports(nodes * 4) if p not in client_ports]
    controller_ports, tls_ports = more[:nodes], more[nodes:2 * nodes]
    return [
        NodeSpec(i + 1, client_ports[i], controller_ports[i], root / f"node-{i + 1}" / "data",
                 tls_ports[i] if secure else None)
        for i in range(nodes)
    ]


def _node_dir(spec: NodeSpec) -> Path:
    """A node's directory: the parent of its Kafka ``log.dirs``."""
    return spec.log_dir.parent


def _prepare(specs: Sequence[NodeSpec], java: str, libs: Path, root: Path,
             secure: bool) -> tuple[str, SecureSetup | None]:
    """Wipe ``root``, make a secure broker's credentials, write every node's files, format storage.

    Returns the cluster id and, if ``secure``, the credentials (SCRAM users are created at format time).
    """
    shutil.rmtree(root, ignore_errors=True)
    setup = make_secure_setup(root) if secure else None
    server = server_settings(setup) if setup else None
    for spec in specs:
        process.prepare_node_dir(spec, specs, _node_dir(spec), server)
    cluster_id = process.new_cluster_id()
    process.format_storage(java, libs, [_node_dir(s) for s in specs], cluster_id, setup.scram_args() if setup else ())
    return cluster_id, setup


def _node_info(spec: NodeSpec, pid: int) -> NodeInfo:
    return NodeInfo(spec.node_id, pid, spec.port, spec.controller_port, _node_dir(spec))


def _bootstrap(specs: Sequence[NodeSpec]) -> str:
    return ",".join(f"{HOST}:{s.port}" for s in specs)


def _forget(root: Path, keep_data: bool) -> None:
    remove_state(root)
    if not keep_data:
        shutil.rmtree(data_root(root), ignore_errors=True)


@contextmanager
def _home_lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "broker.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
