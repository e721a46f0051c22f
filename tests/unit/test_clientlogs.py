"""librdkafka's lines in epochq's log: one of a kind per interval, the next saying how many were left out."""

from __future__ import annotations

import logging

import pytest

from engine.clientlogs import Throttle, error_callback, throttled
from engine.config import load_settings

FAIL = ("FAIL", "rdkafka#consumer-1", "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to "
        "ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(args: tuple[str, str, str], level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("epochq.kafka", level, __file__, 1, "%s [%s] %s", args, None)


def test_a_repeated_client_line_is_shown_once_per_interval_with_a_count() -> None:
    clock = Clock()
    throttle = Throttle(20.0, clock)
    logging.getLogger("epochq.kafka").setLevel(logging.INFO)
    shown = []
    for second in range(41):  # one failure a second for 40 s (librdkafka logs ~30 a second across clients)
        clock.now = float(second)
        for _ in range(30):
            rec = record(FAIL)
            if throttle.filter(rec):
                shown.append(rec)
    assert [r.getMessage() for r in shown] == [
        "kafka: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in "
        "state CONNECT)",
        "kafka: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in "
        "state CONNECT) (599 more like it in the last 20 s)",
        "kafka: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in "
        "state CONNECT) (599 more like it in the last 20 s)"]
    assert {r.levelname for r in shown} == {"WARNING"}  # a client retries a failed connection by itself


def test_other_kinds_pass_on_their_own() -> None:
    logging.getLogger("epochq.kafka").setLevel(logging.INFO)
    throttle = Throttle(20.0, Clock())
    assert throttle.filter(record(FAIL))
    assert throttle.filter(record(("GETPID", "rdkafka#producer-1", "Failed to acquire transactional PID")))
    assert not throttle.filter(record(FAIL))


def test_errors_go_through_the_same_logger(caplog: pytest.LogCaptureFixture) -> None:
    class Err:
        def str(self) -> str:
            return "1/1 brokers are down"

        def code(self) -> int:
            return -187

        def fatal(self) -> bool:
            return False

    logger = throttled(logging.getLogger("test.clientlogs"))
    with caplog.at_level(logging.INFO, "test.clientlogs"):
        for _ in range(50):
            error_callback(logger)(Err())
    assert caplog.messages == ["kafka: 1/1 brokers are down"]


def test_every_client_configuration_routes_its_lines_and_errors() -> None:
    conf = load_settings(bootstrap="b:9092").kafka_config()
    assert isinstance(conf["logger"], logging.Logger) and callable(conf["error_cb"])
    assert any(isinstance(f, Throttle) for f in conf["logger"].filters)


def test_a_line_that_says_it_is_retrying_is_information() -> None:
    rec = record(("GETPID", "rdkafka#producer-1", "Failed to acquire idempotence PID from broker b:1/1: Broker: "
                                                  "Coordinator load in progress: retrying"), logging.WARNING)
    rec.name = "test.clientlogs.info"
    logging.getLogger(rec.name).setLevel(logging.INFO)
    assert Throttle(20.0, Clock()).filter(rec) and rec.levelname == "INFO"


def test_a_line_made_information_is_dropped_where_only_warnings_are_shown() -> None:
    logger = logging.getLogger("test.clientlogs.quiet")
    logger.setLevel(logging.WARNING)
    rec = logging.LogRecord(logger.name, logging.WARNING, __file__, 1, "%s [%s] %s",
                            ("GETPID", "rdkafka#producer-1", "Failed to acquire idempotence PID: retrying"), None)
    assert not Throttle(20.0, Clock()).filter(rec)


def test_no_client_line_is_more_than_a_warning_the_edge_says_it_once() -> None:
    logging.getLogger("epochq.kafka").setLevel(logging.INFO)
    refused = ("ADDPARTS", "rdkafka#producer-1", "TxnCoordinator/1: Failed to add partition \"ns.commands\" [2] to "
               "transaction: Broker: Topic authorization failed")
    rec = record(refused)
    assert Throttle(20.0, Clock()).filter(rec)
    assert rec.levelname == "WARNING"  # the engine's own ERROR line names the grant (loop/refusals.py)
