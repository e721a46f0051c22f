"""Every librdkafka error becomes one typed error where it enters (the Kafka edge, engine/runtime/kafka/)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from engine.errors import (
    AccessDeniedError,
    EpochqError,
    FencedError,
    KafkaUnavailableError,
    TransactionAbortedError,
    ValidationError,
)
from engine.runtime import kafka
from engine.runtime.kafka import errors as edge
from engine.runtime.kafka.plain import Deliveries, produce_each


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


# --- calls outside the owner's transaction: engine.runtime.kafka.errors and .plain ---------------------------

def test_a_read_or_admin_error_is_typed_and_names_what_was_done() -> None:
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed"))
    down = KafkaException(KafkaError(KafkaError._TRANSPORT, "Local: Broker transport failure"))
    with pytest.raises(AccessDeniedError, match="^cannot list topics: TOPIC_AUTHORIZATION_FAILED"):
        with edge.translated("cannot list topics"):
            raise refused
    with pytest.raises(KafkaUnavailableError, match="^cannot list topics: Local: Broker transport failure$"):
        with edge.translated("cannot list topics"):
            raise down
    assert isinstance(edge.failure(KafkaError(KafkaError._TIMED_OUT, "t"), "reading"), KafkaUnavailableError)


def test_an_escaped_librdkafka_error_is_typed_and_anything_else_is_left_alone() -> None:
    down = KafkaException(KafkaError(KafkaError._TRANSPORT, "Local: Broker transport failure"))
    other = KeyError("x")
    assert isinstance(edge.typed(down), EpochqError)
    assert edge.typed(other) is other


def test_the_end_of_a_partition_is_not_an_error() -> None:
    assert edge.is_end_of_partition(KafkaError(KafkaError._PARTITION_EOF))
    assert not edge.is_end_of_partition(KafkaError(KafkaError._TRANSPORT))
    assert not edge.is_end_of_partition(None)


def test_a_batch_s_first_failed_delivery_is_its_typed_error() -> None:
    deliveries = Deliveries()
    deliveries(None, None)
    assert deliveries.error("2 of 2 commands were not accepted") is None
    deliveries(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), None)
    error = deliveries.error("1 of 2 commands were not accepted")
    assert isinstance(error, ValidationError) and error.field == "payload"


def test_a_refused_produce_of_a_batch_names_the_job_it_was() -> None:
    fatal = KafkaError(KafkaError._FATAL, "producer failed for good", fatal=True)
    with pytest.raises(KafkaUnavailableError, match="^job j-2: the producer failed for good"):
        produce_each(Refusing(fatal), "t", [(b"v", b"j-2", None)], Deliveries())  # type: ignore[arg-type]


def test_a_fatal_error_that_is_no_fence_is_a_failed_producer_and_a_fence_still_a_fence() -> None:
    """A fatal error is a fence when it says so or does not say why; any other fatal error is a dead producer of
    a partition still ours (the rehearsal's INVALID_TXN_STATE at EndTxn)."""
    from engine.errors import PartitionLostError, ProducerFailedError

    invalid = KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction: Broker: Producer attempted a "
                         "transactional operation in an invalid state", fatal=True)
    failed = kafka.translate(KafkaException(invalid))
    assert isinstance(failed, ProducerFailedError) and not isinstance(failed, PartitionLostError)
    assert "INVALID_TXN_STATE" in str(failed)
    for fence in (KafkaError(KafkaError.PRODUCER_FENCED, "producer fenced", fatal=True),
                  KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True),
                  KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "old epoch", fatal=True),
                  KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True)):  # no word of why: a fence
        assert isinstance(kafka.translate(KafkaException(fence)), FencedError), fence
