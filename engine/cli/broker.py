"""``epochq broker start|stop|status|restart``: the local Apache Kafka for development and tests."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from engine import broker
from engine.broker.errors import BrokerError
from engine.broker.secure import ADMIN, CERT_USERS, USERS
from engine.cli.common import port, seconds

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``broker`` subcommand and its verbs to ``subparsers``."""
    parser = subparsers.add_parser("broker", help="run a local Apache Kafka (KRaft) from Maven jars")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    start = verbs.add_parser("start", help="start the local broker (no-op if it is running)")
    start.add_argument("--nodes", type=int, choices=(1, 3), default=1, help="cluster size (default 1)")
    start.add_argument("--port", type=port, help="client port of node 1, 1-65535 (default: a free port)")
    start.add_argument("--timeout", type=seconds, default=90.0, help="seconds to wait for readiness")
    start.add_argument("--secure", action="store_true",
                       help="SASL_SSL (SCRAM-SHA-512) with TLS from a fresh local CA, and the standard authorizer; "
                            "prints where the CA and each user's settings are")
    start.set_defaults(func=_guarded(_start))
    stop = verbs.add_parser("stop", help="stop the local broker and delete its data")
    stop.add_argument("--keep-data", action="store_true", help="keep the node directories and logs")
    stop.set_defaults(func=_guarded(_stop))
    restart = verbs.add_parser("restart", help="stop one node and start it again on its config and data")
    restart.add_argument("--node", type=int, required=True, metavar="N", help="node id (1, or 1-3)")
    restart.add_argument("--hard", action="store_true", help="SIGKILL instead of SIGTERM")
    restart.add_argument("--timeout", type=seconds, default=90.0, help="seconds to wait for readiness")
    restart.set_defaults(func=_guarded(_restart))
    status = verbs.add_parser("status", help="show whether the local broker is running")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.set_defaults(func=_guarded(_status))


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn a :class:`BrokerError` into its message on stderr and exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except BrokerError as e:
            print(f"epochq broker: error: {e.message}", file=sys.stderr)
            if e.detail:
                print(e.detail, file=sys.stderr)
            return 2

    return run


def _start(args: argparse.Namespace) -> int:
    info = broker.start(nodes=args.nodes, port=args.port, timeout=args.timeout, secure=args.secure)
    print(f"bootstrap: {info.bootstrap}")
    for node in info.nodes:
        print(f"node {node.node_id}: pid {node.pid}, logs in {node.log_dir}")
    print(f"state: {info.state_file}")
    if info.secure_dir is not None:
        _print_secure(info.secure_dir)
    return 0


def _print_secure(secure_dir: Path) -> None:
    """Where a secure broker's CA and credentials are: paths only, never a password."""
    print("security: SASL_SSL, SCRAM-SHA-512, standard authorizer (only ACLs and super users allowed)")
    print(f"CA certificate: {secure_dir / 'ca.pem'}")
    for user in USERS:
        role = "super user" if user == ADMIN else "needs `epochq acl apply`"
        mtls = f" (mTLS: {user}-mtls.env)" if user in CERT_USERS else ""
        print(f"user {user} ({role}): settings in {secure_dir / 'users' / f'{user}.env'}{mtls}")
    print(f"use one: set -a; . {secure_dir / 'users' / 'admin.env'}; set +a")


def _stop(args: argparse.Namespace) -> int:
    stopped = broker.stop(keep_data=args.keep_data)
    print("stopped" if stopped else "not running")
    return 0


def _restart(args: argparse.Namespace) -> int:
    node = broker.restart_node(args.node, hard=args.hard, timeout=args.timeout)
    print(f"node {node.node_id}: restarted, pid {node.pid}, port {node.port}, logs in {node.log_dir}")
    return 0


def _status(args: argparse.Namespace) -> int:
    st = broker.status()
    if args.json:
        print(json.dumps(_status_doc(st), sort_keys=True))
        return 0 if st.running else 1
    if not st.nodes:
        print(f"not running (no state in {st.state_file})")
        return 1
    print(f"{'running' if st.running else 'not running'}: bootstrap {st.bootstrap}"
          f"{' (secure)' if st.secure_dir else ''}")
    for node in st.nodes:
        print(f"node {node.node_id}: pid {node.pid}, port {node.port}, {'alive' if node.alive else 'dead'}")
    return 0 if st.running else 1


def _status_doc(st: broker.BrokerStatus) -> dict[str, object]:
    return {
        "running": st.running,
        "bootstrap": st.bootstrap,
        "secure_dir": str(st.secure_dir) if st.secure_dir else None,
        "state_file": str(st.state_file),
        "nodes": [
            {"node_id": n.node_id, "pid": n.pid, "port": n.port, "alive": n.alive} for n in st.nodes
        ],
    }
