"""The Kafka edge's ports: reads return records only, every call is translated, no module outside holds a client.

The clients here are librdkafka's own, pointed at a port nobody listens on: the calls that fail at once fail as
they would against a cluster that does not answer (no broker, no stand-in)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer

from engine.errors import AccessDeniedError, EpochqError, KafkaUnavailableError, ValidationError
from engine.runtime.execution.outputs import OutputRecord
from engine.runtime.kafka.errors import read_refused
from engine.runtime.kafka.plain import Writer
from engine.runtime.kafka.ports import CommandSource, EventLog, TopicReader, Transaction, checked, refused_read
from engine.runtime.loop import effects_kafka
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.effects import Output

ENGINE = Path(__file__).resolve().parents[3] / "engine"
NOWHERE = "127.0.0.1:1"
CLIENT_TYPES = {"Consumer", "Producer", "Message", "TopicPartition"}
CLIENT_MAKERS = {"kafka": {"events_reader", "command_producer", "dispatch_consumer", "heartbeats_reader",
                           "owner_producer", "commands_consumer"},
                 "plain": {"producer", "send", "write"}}
"""The calls that make (or take) a client, by the module they are called on."""


def message(offset: int, error: KafkaError | None = None, topic: str = "t") -> Message:
    return Message(topic=topic, partition=0, offset=offset, key=b"k", value=b"v%d" % offset, error=error)


def test_a_read_returns_the_records_and_skips_the_end_of_a_partition_and_a_moment_s_trouble() -> None:
    messages = [message(1), message(2, KafkaError(KafkaError._PARTITION_EOF)), message(3),
                message(4, KafkaError(KafkaError._TRANSPORT))]

    records = checked(messages, refused_read)

    assert [(r.offset(), r.value()) for r in records] == [(1, b"v1"), (3, b"v3")]


def test_a_refused_read_raises_access_denied_naming_the_topic_never_an_empty_answer() -> None:
    refused = [message(1), message(2, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), topic="ns.events")]

    with pytest.raises(AccessDeniedError, match=r"^cannot read ns\.events: TOPIC_AUTHORIZATION_FAILED"):
        checked(refused, refused_read)
    with pytest.raises(AccessDeniedError, match=r"^not authorized to read ns\.events .*the command was sent"):
        checked(refused, read_refused)  # a wait's reader: the command went out, its outcome cannot be read


def test_a_refusal_that_names_no_topic_is_named_by_the_topic_read() -> None:
    group_refused = Message(error=KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))  # the client's, of no topic

    with pytest.raises(AccessDeniedError, match=r"^not authorized to read ns\.events \(GROUP_AUTHORIZATION_FAILED\)"):
        checked([group_refused], read_refused, topic="ns.events")


def test_a_reader_that_is_told_its_errors_hears_each_as_one_line_and_reads_on() -> None:
    told: list[str] = []
    messages = [message(1, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), message(2),
                message(3, KafkaError(KafkaError._PARTITION_EOF))]

    records = checked(messages, refused_read, told.append)

    assert [r.offset() for r in records] == [2]
    assert len(told) == 1 and told[0].startswith("reading t[0]: ") and "authorization" in told[0].lower()


def test_a_reader_s_failed_calls_come_out_typed_naming_what_was_asked() -> None:
    reader = TopicReader(Consumer({"bootstrap.servers": NOWHERE, "group.id": "ports-test", "log_level": 0}))
    try:
        with pytest.raises(KafkaUnavailableError, match=r"^cannot seek t: .*Unknown partition"):
            reader.seek("t", 0, 5)  # not assigned: librdkafka refuses at once
        with pytest.raises(KafkaUnavailableError, match=r"^cannot look up the offsets by time of t: "):
            reader.offsets_at("t", [0], 0, timeout=0.2)  # no broker answers
    finally:
        reader.close()


def test_a_writer_s_record_too_large_is_a_validation_error_naming_the_payload() -> None:
    writer = Writer(Producer({"bootstrap.servers": NOWHERE, "message.max.bytes": 1000, "log_level": 0}))

    with pytest.raises(ValidationError, match=r"^payload: .* is larger than Kafka accepts") as raised:
        writer.produce("ns.commands", b"x" * 2000, b"job-1")
    assert raised.value.field == "payload"


def _client_names(path: Path) -> list[str]:
    """What ``path`` names of the edge's clients: the types it imports from ``engine.runtime.kafka``, and the
    calls there that make or take a client."""
    tree = ast.parse(path.read_text(), str(path))
    found = [f"imports {alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and node.module == "engine.runtime.kafka" for alias in node.names if alias.name in CLIENT_TYPES]
    found += [f"calls {node.value.id}.{node.attr}" for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Name) and node.attr in CLIENT_MAKERS.get(node.value.id, ())]
    return found


def test_no_module_outside_the_edge_holds_a_librdkafka_client_not_even_the_loop() -> None:
    outside = [path for path in sorted(ENGINE.rglob("*.py")) if not path.is_relative_to(ENGINE / "runtime" / "kafka")]
    holders = {str(path.relative_to(ENGINE.parent)): names for path in outside if (names := _client_names(path))}

    assert holders == {}, ("hold a port instead (a TopicReader, CommandSource, EventLog, Transaction or plain.Writer: "
                           "engine/runtime/kafka)")


def test_the_loop_s_ports_say_a_failed_call_typed() -> None:
    consumer = Consumer({"bootstrap.servers": NOWHERE, "group.id": "ports-test", "log_level": 0})
    try:
        with pytest.raises(KafkaUnavailableError, match=r"Unknown partition"):
            CommandSource(consumer, "ns.commands").seek(0, 5)  # not assigned: librdkafka refuses at once
        with pytest.raises(KafkaUnavailableError, match=r"empty assignment"):
            EventLog(consumer, "ns.events").remove(3)
    finally:
        consumer.close()
    with pytest.raises(KafkaUnavailableError, match=r"transactional\.id"):
        Transaction(Producer({"bootstrap.servers": NOWHERE, "log_level": 0})).begin()


class Writing:
    """What the write step hands the handlers' records to (``loop/written.py``'s, minus the partition)."""

    def __init__(self, staged: Staged) -> None:
        self.staged, self.refused = staged, {}


def test_a_handler_s_record_refused_at_once_blames_its_attempt_and_the_error_comes_out_typed() -> None:
    staged = Staged()
    staged.outputs.append(Output("job-1", 2, (OutputRecord("out", b"x" * 2000),)))
    writing = Writing(staged)
    transaction = Transaction(Producer({"bootstrap.servers": NOWHERE, "message.max.bytes": 1000, "log_level": 0}))

    with pytest.raises(EpochqError):
        effects_kafka.produce(writing, transaction)  # type: ignore[arg-type]
    assert writing.refused == {("job-1", 2): "out: MSG_SIZE_TOO_LARGE: Unable to produce message: Broker: Message size "
                                             "too large"}
