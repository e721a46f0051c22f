"""The one-shot reachability check: which bootstrap servers answer, and why the others do not (local sockets only)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from engine.errors import KafkaUnavailableError
from engine.runtime.reach import check_reachable, connect_error


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP listener that reads what it is sent and closes the connection without a word (not Kafka)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                conn.recv(1024)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    server.close()


def closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends


def test_a_closed_port_and_an_unknown_host_are_named_with_the_reason() -> None:
    port = closed_port()
    with pytest.raises(KafkaUnavailableError) as e:
        check_reachable({"bootstrap.servers": f"{port},no-such-host.invalid:9092"}, timeout=2)
    message = str(e.value)
    assert message.startswith(f"cannot reach Kafka at {port}: connection refused; no-such-host.invalid:9092: "
                              "host not found"), message


def test_a_listener_that_does_not_speak_kafka_is_not_a_broker(silent_listener: str) -> None:
    assert connect_error(silent_listener, 2) == "connection closed without a Kafka answer"
    assert connect_error(silent_listener, 2, speak=False) is None  # over TLS, the connection alone counts
    with pytest.raises(KafkaUnavailableError, match=f"at {silent_listener}: connection closed"):
        check_reachable({"bootstrap.servers": silent_listener}, timeout=2)
    check_reachable({"bootstrap.servers": silent_listener, "security.protocol": "SSL"}, timeout=2)


@pytest.fixture
def mute_listener() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers nor closes them (a hung broker, a wrong port)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_a_listener_that_never_answers_is_not_reached(mute_listener: str) -> None:
    assert connect_error(mute_listener, 1) == "no answer within 1 s"
    with pytest.raises(KafkaUnavailableError) as e:
        check_reachable({"bootstrap.servers": mute_listener}, timeout=1)
    assert str(e.value).startswith(f"cannot reach Kafka at {mute_listener}: no answer within 1 s"), str(e.value)
    with pytest.raises(KafkaUnavailableError, match=f"at {mute_listener}: no answer"):  # not remembered as reached
        check_reachable({"bootstrap.servers": mute_listener}, timeout=1)
