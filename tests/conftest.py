"""Session fixtures: one real Kafka for the whole test run, and per-test topic namespaces.

The broker is chosen in this order:

1. ``EPOCHQ_BOOTSTRAP`` if set (a broker you run yourself; nothing is started or stopped);
2. a testcontainers ``KafkaContainer`` if a Docker engine answers;
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

INTEGRATION_DIR = Path(__file__).parent / "integration"
CONTAINER_IMAGE = os.environ.get("EPOCHQ_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:8.0.0")
CONTAINER_ENV = {
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
    "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
    "KAFKA_DEFAULT_REPLICATION_FACTOR": "1",
    "KAFKA_MIN_INSYNC_REPLICAS": "1",
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
}


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


def _kafka_container() -> Iterator[str]:
    from testcontainers.community.kafka import KafkaContainer

    container = KafkaContainer(CONTAINER_IMAGE).with_kraft()
    for key, value in CONTAINER_ENV.items():
        container.with_env(key, value)
    container.start(timeout=120)
    try:
        yield container.get_bootstrap_server()
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
