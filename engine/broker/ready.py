"""Readiness check: the cluster is ready when an AdminClient lists every expected broker."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from engine.broker.config import HOST
from engine.broker.errors import BrokerExitedError, BrokerTimeoutError
from engine.broker.process import first_error, log_tail, pid_alive
from engine.broker.state import NodeInfo
from engine.runtime.kafka.admin import AdminClient, admin_with, listed_broker_ids

__all__ = ["wait_node_ready", "wait_ready"]

POLL_S = 0.25
METADATA_TIMEOUT_S = 2.0
# librdkafka complains loudly while the port is still closed; route it to logging.
_client_log = logging.getLogger("engine.broker.librdkafka")


def wait_ready(client: Mapping[str, str], nodes: Sequence[NodeInfo], timeout: float) -> None:
    """Block until every node is listed by the cluster metadata, asked with the librdkafka settings ``client``.

    Raises :class:`BrokerExitedError` (with the log tail) if a JVM dies meanwhile, and
    :class:`BrokerTimeoutError` when ``timeout`` seconds pass.
    """
    deadline = time.monotonic() + timeout
    bootstrap = client["bootstrap.servers"]
    admin: AdminClient | None = None
    while True:
        _raise_if_exited(nodes)
        if admin is None and _all_ports_open(nodes):
            admin = _admin(client)
        if admin is not None and _listed_brokers(admin) >= len(nodes):
            return
        if time.monotonic() >= deadline:
            raise _timeout_error(bootstrap, nodes, timeout)
        time.sleep(POLL_S)


def wait_node_ready(node: NodeInfo, client: Mapping[str, str], timeout: float) -> None:
    """Block until ``node`` itself answers a metadata request listing it (after a restart).

    Asked of the node alone (``client``'s settings, its address): the others may still list a
    node that was killed a moment ago.
    """
    deadline = time.monotonic() + timeout
    admin: AdminClient | None = None
    while True:
        _raise_if_exited([node])
        if admin is None and _port_open(node.port):
            admin = _admin({**client, "bootstrap.servers": f"{HOST}:{node.port}"})
        if admin is not None and node.node_id in _listed_broker_ids(admin):
            return
        if time.monotonic() >= deadline:
            raise _timeout_error(f"{HOST}:{node.port}", [node], timeout)
        time.sleep(POLL_S)


def _raise_if_exited(nodes: Sequence[NodeInfo]) -> None:
    for node in nodes:
        if not pid_alive(node.pid, node.config_path):
            cause = first_error(node) or "no ERROR logged"
            raise BrokerExitedError(
                f"broker node {node.node_id} (pid {node.pid}) exited during start: {cause} "
                f"(logs in {node.log_dir})",
                detail=log_tail(node),
            )


def _timeout_error(bootstrap: str, nodes: Sequence[NodeInfo], timeout: float) -> BrokerTimeoutError:
    return BrokerTimeoutError(
        f"broker at {bootstrap} not ready after {timeout:.0f}s (raise --timeout on a slow "
        f"machine); logs in {nodes[0].node_dir.parent}",
        detail="\n".join(log_tail(n) for n in nodes),
    )


def _all_ports_open(nodes: Sequence[NodeInfo]) -> bool:
    return all(_port_open(n.port) for n in nodes)


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _admin(client: Mapping[str, str]) -> AdminClient:
    conf: dict[str, Any] = {**client, "logger": _client_log}
    return admin_with(conf)


def _listed_brokers(admin: AdminClient) -> int:
    return len(_listed_broker_ids(admin))


def _listed_broker_ids(admin: AdminClient) -> set[int]:
    return listed_broker_ids(admin, METADATA_TIMEOUT_S)
