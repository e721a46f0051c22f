"""The local Kafka works for what epochq needs: acks=all, transactions, and losing a node."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from engine import broker
from engine.broker import process
from engine.broker.fetch import ensure_jars, require_java
from engine.broker.state import BrokerInfo, NodeInfo, save_state
from engine.cli.broker import register
from tests.integration.conftest import eventually

DEADLINE_S = 30.0


def create_topic(admin: AdminClient, name: str, replication: int = 1, **config: str) -> None:
    """Create ``name`` with one partition and wait for the result."""
    futures = admin.create_topics([NewTopic(name, 1, replication, config=config)])
    futures[name].result(timeout=DEADLINE_S)


def read_all(bootstrap: str, topic: str, expected: int, **extra: str) -> list[bytes]:
    """Read partition 0 of ``topic`` from the beginning until ``expected`` values arrived."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
        "enable.auto.commit": False, **extra,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def produce_all(producer: Producer, topic: str, values: list[bytes]) -> list[KafkaError]:
    """Produce ``values`` and flush; return the delivery errors."""
    errors: list[KafkaError] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(DEADLINE_S) == 0
    return errors


def test_acks_all_round_trip_through_a_consumer_group(bootstrap: str, kafka_admin: AdminClient, unique_ns: str) -> None:
    topic = f"{unique_ns}.roundtrip"
    create_topic(kafka_admin, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    assert produce_all(producer, topic, [b"hello"]) == []

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{unique_ns}-group",
        "group.protocol": "consumer", "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic])
    try:
        msg = None
        deadline = time.monotonic() + DEADLINE_S
        while msg is None and time.monotonic() < deadline:
            polled = consumer.poll(0.5)
            msg = polled if polled is not None and polled.error() is None else None
        assert msg is not None and msg.value() == b"hello"
        consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()


def test_transactions_commit_and_abort(bootstrap: str, kafka_admin: AdminClient, unique_ns: str) -> None:
    topic = f"{unique_ns}.txn"
    create_topic(kafka_admin, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{unique_ns}-tx"})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(DEADLINE_S)

    assert read_all(bootstrap, topic, 1, **{"isolation.level": "read_committed"}) == [b"committed"]


@pytest.fixture
def three_nodes(tmp_path: Path) -> Iterator[BrokerInfo]:
    """A 3-node cluster in its own broker home, stopped afterwards even on failure."""
    try:
        yield broker.start(nodes=3, home=tmp_path, timeout=150)  # 3 JVMs on 2 cores: slow when the box is busy
    finally:
        # nothing of it is kept: a node that lost its quorum waits out a graceful stop, so it gets 5 s, not 30
        broker.stop(home=tmp_path, timeout=5)


@pytest.mark.skipif(shutil.which("java") is None, reason="the local 3-node cluster needs java 17+")
def test_three_nodes_keep_acks_all_writes_after_losing_the_leader(three_nodes: BrokerInfo) -> None:
    bs = three_nodes.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    assert len(admin.list_topics(timeout=10).brokers) == 3
    create_topic(admin, "replicated", replication=3, **{"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": bs, "acks": "all", "enable.idempotence": True})
    assert produce_all(producer, "replicated", [b"%d" % i for i in range(10)]) == []

    leader = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0].leader
    broker.stop_node(leader, hard=True, home=three_nodes.home)
    statuses = {n.node_id: n.alive for n in broker.status(home=three_nodes.home).nodes}
    assert statuses == {n: n != leader for n in (1, 2, 3)}

    assert produce_all(producer, "replicated", [b"%d" % i for i in range(10, 20)]) == []

    restarted = broker.restart_node(leader, home=three_nodes.home)
    statuses = {n.node_id: (n.pid, n.alive) for n in broker.status(home=three_nodes.home).nodes}
    assert statuses[leader] == (restarted.pid, True) and all(alive for _, alive in statuses.values())
    assert produce_all(producer, "replicated", [b"%d" % i for i in range(20, 30)]) == []
    values = read_all(bs, "replicated", 30)
    assert sorted(int(v) for v in values) == list(range(30))


def run_cli(*argv: str) -> int:
    """Run ``epochq broker ...`` through the subcommand's own parser."""
    parser = argparse.ArgumentParser(prog="epochq")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["broker", *argv])
    return int(args.func(args))


def test_stale_state_is_not_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EPOCHQ_BROKER_HOME", str(tmp_path))
    dead = NodeInfo(1, 2**22 + 12345, 1, 2, tmp_path / "broker" / "node-1")
    save_state(BrokerInfo("127.0.0.1:1", "x", (dead,), tmp_path))

    assert broker.bootstrap_from_state() is None
    assert run_cli("status", "--json") == 1
    assert json.loads(capsys.readouterr().out)["running"] is False
    assert run_cli("stop") == 0
    assert not broker.state_path().exists()


def test_start_on_a_taken_port_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    monkeypatch.setenv("EPOCHQ_BROKER_HOME", str(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert run_cli("start", "--port", str(taken.getsockname()[1])) == 2
    err = capsys.readouterr().err
    assert "already in use" in err and err.count("\n") == 1


@pytest.fixture
def one_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[BrokerInfo]:
    """A 1-node broker in its own home (also the environment's), stopped afterwards even on failure."""
    monkeypatch.setenv("EPOCHQ_BROKER_HOME", str(tmp_path))
    try:
        yield broker.start(nodes=1, timeout=120)
    finally:
        broker.stop()


@pytest.mark.skipif(shutil.which("java") is None, reason="the local broker needs java 17+")
def test_restart_keeps_the_data_and_stop_finds_a_node_restarted_by_other_means(
    one_node: BrokerInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    bs, old_pid = one_node.bootstrap, one_node.nodes[0].pid
    create_topic(AdminClient({"bootstrap.servers": bs}), "kept")
    producer = Producer({"bootstrap.servers": bs, "acks": "all"})
    assert produce_all(producer, "kept", [b"before"]) == []

    assert run_cli("restart", "--node", "1", "--hard") == 0
    assert "restarted" in capsys.readouterr().out
    (node,) = broker.status().nodes
    assert node.alive and node.pid != old_pid and not process.pid_alive(old_pid)
    assert produce_all(producer, "kept", [b"after"]) == []
    assert read_all(bs, "kept", 2) == [b"before", b"after"]

    # Killed and started again behind the state file's back: stop still finds the JVM by its config.
    broker.stop_node(1, hard=True)
    stray = process.launch(require_java(), ensure_jars(), one_node.nodes[0].node_dir, 512)
    # the JVM's command line shows up once its launcher is done
    eventually(lambda: broker.status().running, DEADLINE_S, "the stray JVM found", every=0.1)
    assert broker.status().nodes[0].pid == stray
    assert run_cli("stop") == 0 and capsys.readouterr().out.strip() == "stopped"
    assert not process.pid_alive(stray)


def test_restart_without_a_broker_or_of_a_missing_node_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EPOCHQ_BROKER_HOME", str(tmp_path))
    assert run_cli("restart", "--node", "1") == 2
    err = capsys.readouterr().err
    assert "no local broker recorded" in err and err.count("\n") == 1

    dead = NodeInfo(1, 2**22 + 12345, 1, 2, tmp_path / "broker" / "node-1")
    save_state(BrokerInfo("127.0.0.1:1", "x", (dead,), tmp_path))
    assert run_cli("restart", "--node", "4") == 2
    err = capsys.readouterr().err
    assert "no node 4" in err and "its nodes: 1" in err and err.count("\n") == 1
