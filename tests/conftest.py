"""Session fixtures: one real Kafka for the whole test run, and per-test topic namespaces.

The broker is chosen in this order:

1. ``EPOCHQ_BOOTSTRAP`` if set (a broker you run yourself; nothing is started or stopped);
2. a container of Apache Kafka's image, of the version the project runs (the broker of docker-compose.yml), if a
   Docker engine answers (``EPOCHQ_TEST_KAFKA_IMAGE`` names another image of the same family);
3. the local JVM broker of :mod:`engine.broker`, in a temporary ``EPOCHQ_BROKER_HOME``
   that lives as long as the session, stopped at teardown even when tests fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from engine.broker.fetch import KAFKA_VERSION

INTEGRATION_DIR = Path(__file__).parent / "integration"
DEFAULT_IMAGE = f"apache/kafka:{KAFKA_VERSION}"
"""The broker the project runs (engine/broker/fetch.py), in the image docker-compose.yml runs it from."""
CONTAINER_IMAGE = os.environ.get("EPOCHQ_TEST_KAFKA_IMAGE", DEFAULT_IMAGE)
CONTAINER_ENV = {
    "KAFKA_NODE_ID": "1",
    "KAFKA_PROCESS_ROLES": "broker,controller",
    "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
    "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
    "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
    "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "4",
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "4",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
    "KAFKA_DEFAULT_REPLICATION_FACTOR": "1",
    "KAFKA_MIN_INSYNC_REPLICAS": "1",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    "KAFKA_NUM_PARTITIONS": "1",
    "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    "KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS": "1000",
    "KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS": "1000",
    "KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS": "500",
}
"""The kafka service's environment in docker-compose.yml but its listeners (tests/unit/test_compose.py keeps the two
in step): a single KRaft node, replication 1, a fresh group rebalancing at once and short session timeouts allowed."""


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``integration`` marker."""
    config.addinivalue_line("markers", "integration: runs against a real Kafka broker")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under ``tests/integration`` as ``integration``."""
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of the session's Kafka (see the module docstring for the order)."""
    configured = os.environ.get("EPOCHQ_BOOTSTRAP")
    if configured:
        yield configured
    elif _docker_answers():
        yield from _kafka_container()
    else:
        yield from _local_broker(tmp_path_factory.mktemp("broker-home"))


@pytest.fixture(scope="session")
def kafka_admin(bootstrap: str) -> AdminClient:
    """An AdminClient on the session's Kafka."""
    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def unique_ns() -> str:
    """A topic namespace no other test uses, e.g. ``t3f9a0c1b2d``."""
    return f"t{uuid.uuid4().hex[:10]}"


def _docker_answers() -> bool:
    """Decide quickly whether a Docker engine is reachable; any failure means no."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure to reach Docker means no Docker
        return False


def container_listeners(host: str, port: int) -> dict[str, str]:
    """The listeners of the test container: clients and the broker itself (transaction markers, which a broker
    sends to itself too) reach it at ``host:port``, the same port inside the container as on the host."""
    return {"KAFKA_LISTENERS": f"PLAINTEXT://:{port},CONTROLLER://:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{host}:{port}",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}


def _kafka_container() -> Iterator[str]:
    """A container of :data:`CONTAINER_IMAGE` (testcontainers' KafkaContainer drives Confluent's images only)."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    from tests.integration.helpers.ports import free_port

    host, port = DockerClient().host(), free_port()
    container = DockerContainer(CONTAINER_IMAGE).with_bind_ports(port, port)
    container.with_envs(**CONTAINER_ENV, **container_listeners(host, port))
    container.waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(120))
    container.start()
    try:
        yield f"{host}:{port}"
    finally:
        container.stop()


def _local_broker(home: Path) -> Iterator[str]:
    from engine import broker
    from engine.broker.state import HOME_ENV

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HOME_ENV, str(home))
        try:
            yield broker.start(nodes=1, home=home).bootstrap
        finally:
            broker.stop(home=home)
