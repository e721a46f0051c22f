"""Render ``server.properties`` for one node of a local KRaft cluster (pure, no I/O).

Every node runs as combined broker+controller with a static controller quorum, so the
same ``controller.quorum.voters`` string appears on every node.  Replication settings
follow the cluster size: RF 1 / min ISR 1 for one node, RF 3 / min ISR 2 for three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from engine.errors import ConfigError

__all__ = ["NodeSpec", "cluster_settings", "node_settings", "render_server_properties"]

HOST = "127.0.0.1"

# Settings shared by every cluster size: fast startup and fast tests on a small machine.
BASE_SETTINGS: Mapping[str, str] = {
    "process.roles": "broker,controller",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.share.min.session.timeout.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "4",
    "group.coordinator.threads": "1",
    "share.coordinator.threads": "1",
}

# Faster failure detection so a killed node is fenced (and leaves ISRs) within seconds.
MULTI_NODE_SETTINGS: Mapping[str, str] = {
    "broker.heartbeat.interval.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "replica.lag.time.max.ms": "10000",
}

REPLICATION_KEYS = (
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "share.coordinator.state.topic.replication.factor",
    "default.replication.factor",
)
MIN_ISR_KEYS = (
    "transaction.state.log.min.isr",
    "share.coordinator.state.topic.min.isr",
    "min.insync.replicas",
)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Where one node listens and keeps its log segments."""

    node_id: int
    port: int
    controller_port: int
    log_dir: Path
    tls_port: int | None = None
    """A secure broker's mTLS listener (``SSL``, client certificates required); ``None`` for PLAINTEXT."""


def cluster_settings(nodes: int) -> dict[str, str]:
    """Decide the replication settings for a cluster of ``nodes`` nodes (1 or 3)."""
    if nodes not in (1, 3):
        raise ConfigError(f"nodes must be 1 or 3, not {nodes}")
    rf, min_isr = (1, 1) if nodes == 1 else (3, 2)
    settings = {key: str(rf) for key in REPLICATION_KEYS}
    settings.update({key: str(min_isr) for key in MIN_ISR_KEYS})
    if nodes > 1:
        settings.update(MULTI_NODE_SETTINGS)
    return settings


def quorum_voters(cluster: Sequence[NodeSpec]) -> str:
    """Return the static ``controller.quorum.voters`` string shared by all nodes."""
    return ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in cluster)


def node_settings(node: NodeSpec, cluster: Sequence[NodeSpec],
                  secure: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return every server setting for ``node`` as a name → value mapping.

    ``secure``: the settings of a secure broker (:func:`engine.broker.secure.server_settings`);
    its client listener is then ``SASL_SSL`` instead of ``PLAINTEXT``.
    """
    client = "SASL_SSL" if secure else "PLAINTEXT"
    advertised = f"{client}://{HOST}:{node.port}"
    if secure and node.tls_port is not None:
        advertised += f",SSL://{HOST}:{node.tls_port}"
    settings = dict(BASE_SETTINGS)
    settings.update(cluster_settings(len(cluster)))
    settings.update({
        "node.id": str(node.node_id),
        "controller.quorum.voters": quorum_voters(cluster),
        "listeners": f"{advertised},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": advertised,
        "log.dirs": str(node.log_dir),
    })
    settings.update(secure or {})
    return settings


def render_server_properties(node: NodeSpec, cluster: Sequence[NodeSpec],
                             secure: Mapping[str, str] | None = None) -> str:
    """Render ``server.properties`` text for ``node`` of ``cluster``."""
    lines = [f"# epochq local broker, node {node.node_id} of {len(cluster)} (generated)"]
    lines += [f"{key}={_escape(value)}" for key, value in node_settings(node, cluster, secure).items()]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """Escape a value for the Java properties format (backslashes and ``:``/``=`` are safe)."""
    return value.replace("\\", "\\\\")
