"""The broker state file: the source of truth for which local broker nodes we started.

It is a small JSON document in the broker home (``EPOCHQ_BROKER_HOME``, default
``~/.local/state/epochq``) recording, per node, its pid, ports and directory, plus the
bootstrap address and cluster id.  Node directories live under ``<home>/broker/``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import BrokerNotRunningError

__all__ = [
    "HOME_ENV",
    "BrokerInfo",
    "NodeInfo",
    "broker_home",
    "data_root",
    "load_state",
    "remove_state",
    "save_state",
    "state_path",
]

HOME_ENV = "EPOCHQ_BROKER_HOME"
STATE_FILE = "broker.json"
DATA_DIR = "broker"
FORMAT_VERSION = 1


def broker_home(home: Path | str | None = None) -> Path:
    """Return the broker home: ``home`` if given, else ``$EPOCHQ_BROKER_HOME``, else the default."""
    if home is not None:
        return Path(home).expanduser()
    override = os.environ.get(HOME_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".local" / "state" / "epochq"


def state_path(home: Path | str | None = None) -> Path:
    """Return the path of the JSON state file in the broker home."""
    return broker_home(home) / STATE_FILE


def data_root(home: Path | str | None = None) -> Path:
    """Return the directory holding one sub-directory per node."""
    return broker_home(home) / DATA_DIR


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One broker+controller JVM: its pid, ports and directory."""

    node_id: int
    pid: int
    port: int
    controller_port: int
    node_dir: Path

    @property
    def config_path(self) -> Path:
        """The node's generated ``server.properties``."""
        return self.node_dir / "server.properties"

    @property
    def log_dir(self) -> Path:
        """Directory of the broker's own logs (``server.log``)."""
        return self.node_dir / "logs"

    @property
    def data_dir(self) -> Path:
        """Directory of the node's log segments and metadata log (``log.dirs``)."""
        return self.node_dir / "data"

    @property
    def console_log(self) -> Path:
        """File receiving the JVM's stdout and stderr."""
        return self.node_dir / "console.log"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A started local cluster: what clients connect to and which processes to stop."""

    bootstrap: str
    cluster_id: str
    nodes: tuple[NodeInfo, ...]
    home: Path
    secure_dir: Path | None = None
    """A secure broker's CA and per-user env files (``epochq broker start --secure``); ``None``: PLAINTEXT."""

    @property
    def state_file(self) -> Path:
        """Where this cluster is recorded."""
        return state_path(self.home)

    def node(self, node_id: int) -> NodeInfo:
        """Return the node with ``node_id``; ``BrokerNotRunningError`` naming the nodes there are if there is none."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        ids = ", ".join(str(n.node_id) for n in self.nodes)
        raise BrokerNotRunningError(f"no node {node_id} in the local cluster at {self.bootstrap} (its nodes: {ids})")


def save_state(info: BrokerInfo) -> None:
    """Write ``info`` to its state file atomically."""
    path = info.state_file
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_to_json(info), indent=2) + "\n")
    tmp.replace(path)


def load_state(home: Path | str | None = None) -> BrokerInfo | None:
    """Read the state file; ``None`` if it is missing or unreadable."""
    path = state_path(home)
    try:
        return _from_json(json.loads(path.read_text()), broker_home(home))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None


def remove_state(home: Path | str | None = None) -> None:
    """Delete the state file if present."""
    state_path(home).unlink(missing_ok=True)


def _to_json(info: BrokerInfo) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "bootstrap": info.bootstrap,
        "cluster_id": info.cluster_id,
        "node_count": len(info.nodes),
        "secure_dir": str(info.secure_dir) if info.secure_dir else None,
        "nodes": [
            {
                "node_id": n.node_id,
                "pid": n.pid,
                "port": n.port,
                "controller_port": n.controller_port,
                "node_dir": str(n.node_dir),
            }
            for n in info.nodes
        ],
    }


def _from_json(doc: dict[str, Any], home: Path) -> BrokerInfo:
    nodes = tuple(
        NodeInfo(
            node_id=int(n["node_id"]),
            pid=int(n["pid"]),
            port=int(n["port"]),
            controller_port=int(n["controller_port"]),
            node_dir=Path(n["node_dir"]),
        )
        for n in doc["nodes"]
    )
    secure_dir = doc.get("secure_dir")
    return BrokerInfo(
        bootstrap=str(doc["bootstrap"]), cluster_id=str(doc["cluster_id"]), nodes=nodes, home=home,
        secure_dir=Path(secure_dir) if secure_dir else None,
    )
