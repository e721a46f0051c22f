"""Every librdkafka error becomes one typed error where it enters (engine/runtime/kafka.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from engine.errors import FencedError, KafkaUnavailableError, TransactionAbortedError, ValidationError
from engine.runtime import kafka


class Refusing:
    """A producer whose produce() raises what librdkafka raised for a zombie (a fatal, fenced producer)."""

    def __init__(self, error: KafkaError):
        self.error = error

    def produce(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        raise KafkaException(self.error)


@pytest.mark.parametrize(("error", "typed"), [
    (KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error", fatal=True), FencedError),
    (KafkaError(KafkaError._FENCED, "fenced by a newer instance"), FencedError),
    (KafkaError(KafkaError.PRODUCER_FENCED, "producer fenced"), FencedError),
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), ValidationError),
    (KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True), TransactionAbortedError),
    (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "no such topic"), KafkaUnavailableError),
])
def test_produce_raises_the_typed_error(error: KafkaError, typed: type) -> None:
    with pytest.raises(typed):
        kafka.produce_owned(Refusing(error), "t", b"v", b"k", 0)  # type: ignore[arg-type]


def test_a_fatal_fenced_transaction_error_is_fenced() -> None:
    fatal = KafkaError(KafkaError._FATAL, "Fatal transaction error: Producer fenced by a newer instance", fatal=True)
    assert isinstance(kafka.translate(KafkaException(fatal)), FencedError)


def test_offset_runs_join_neighbours_within_the_gap_and_seek_past_it() -> None:
    from engine.runtime.kafka import offset_runs

    assert offset_runs([], 10) == []
    assert offset_runs([3], 10) == [(3, 3)]
    assert offset_runs([1, 5, 15, 26, 27, 100], 10) == [(1, 15), (26, 27), (100, 100)]
