"""The Python client's errors name the Kafka they could not reach (librdkafka's say "transport failure" alone)."""

from __future__ import annotations

import socket

import pytest

from engine.client import Client
from engine.config import load_settings
from engine.errors import KafkaUnavailableError


def closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends


def test_an_unreachable_cluster_is_named_by_its_bootstrap_address() -> None:
    address = closed_port()
    client = Client(load_settings(bootstrap=address, namespace="nowhere"))
    try:
        with pytest.raises(KafkaUnavailableError) as e:
            client.submit("noop", {}, tenant="acme")
        assert str(e.value).startswith("cannot write to nowhere.commands: ") and str(e.value).endswith(
            f"(Kafka at {address})"), str(e.value)
    finally:
        client.close()
