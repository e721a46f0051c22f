"""A real local Apache Kafka (KRaft) cluster run as JVM processes from Maven jars.

Public API::

    info = start(nodes=1)          # or 3; idempotent while a recorded cluster is alive
    info.bootstrap                 # "127.0.0.1:PORT[,...]"
    status(); bootstrap_from_state(); stop_node(2, hard=True); restart_node(2); stop()

The jars are fetched once with Maven into ``~/.cache/epochq/kafka-4.4.0/libs``
(``EPOCHQ_KAFKA_LIBS_DIR``); state and data live in ``~/.local/state/epochq``
(``EPOCHQ_BROKER_HOME``).
"""

from __future__ import annotations

from engine.broker.cluster import (
    BrokerStatus,
    NodeStatus,
    bootstrap_from_state,
    restart_node,
    secure_dir_from_state,
    start,
    status,
    stop,
    stop_node,
)
from engine.broker.errors import BrokerError
from engine.broker.fetch import KAFKA_VERSION, ensure_jars, libs_dir
from engine.broker.state import BrokerInfo, NodeInfo, broker_home, state_path

__all__ = [
    "KAFKA_VERSION",
    "BrokerError",
    "BrokerInfo",
    "BrokerStatus",
    "NodeInfo",
    "NodeStatus",
    "bootstrap_from_state",
    "broker_home",
    "ensure_jars",
    "libs_dir",
    "restart_node",
    "secure_dir_from_state",
    "start",
    "state_path",
    "status",
    "stop",
    "stop_node",
]
