"""Plain (non-transactional) clients: a writer that waits for its acknowledgements, a partition's watermarks.

The client's commands, a worker's results and heartbeats, the tenants table and the command-line tools write
through these (outside the edge, as a :class:`Writer`: the port that hides the client's producer); every
librdkafka error comes out typed (``engine.runtime.kafka.errors``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from engine.config import Settings
from engine.errors import KafkaUnavailableError
from engine.errors import EpochqError
from engine.runtime.kafka import command_producer, produce, produce_error
from engine.runtime.kafka.errors import DENIED_CODES, TRANSIENT_READ_CODES, denied, failure, translated


class Deliveries:
    """The delivery reports of a batch of records: the failures kept (a producer that reports only them)."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, _msg: object) -> None:
        if error is not None:
            self.failed.append(error)

    def error(self, what: str) -> EpochqError | None:
        """The typed error of the first failure (``what``: the error's start), or None if none failed."""
        return produce_error(self.failed[0], what) if self.failed else None


def produce_each(producer: Producer, topic: str, records: Iterable[tuple[bytes, bytes, Any]],
                 deliveries: Deliveries) -> None:
    """Hand ``(value, key, headers)`` records to ``producer`` (waiting for queue space when it is full);
    one it refuses is the typed error naming the job its key is (``kafka.produce_error``)."""
    send = producer.produce
    key = b""
    try:
        for value, key, headers in records:
            try:
                send(topic, value, key, on_delivery=deliveries, headers=headers)
            except BufferError:  # the queue is full: wait for space
                produce(producer, topic, value, key, on_delivery=deliveries, headers=headers)
    except KafkaException as e:
        raise produce_error(e.args[0], f"job {key.decode(errors='replace')}") from e


def producer(settings: Settings, config: Mapping[str, Any]) -> Producer:
    """A (non-transactional) producer to the configured cluster, with librdkafka's ``config`` over its settings."""
    return Producer({**settings.kafka_config(), **config})


def write(producer: Producer, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], what: str,
          timeout_s: float) -> None:
    """Write ``(key, value)`` records; wait until the brokers acknowledged each (``what``: the error's start)."""
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _msg: object) -> None:
        if error is not None:
            errors.append(error)

    with translated(what):
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
    if producer.flush(timeout_s) > 0:
        raise KafkaUnavailableError(f"{topic}: write not acknowledged within {timeout_s}s")
    if errors:
        raise failure(errors[0], what)


def send(producer: Producer, topic: str, key: bytes | None, value: bytes | None,
         reported: Callable[[str | None], None]) -> None:
    """Queue one record without waiting (a heartbeat). ``reported`` hears how it went: None once delivered,
    else why not (it could not be queued, or its delivery failed)."""

    def delivered(error: KafkaError | None, _msg: object) -> None:
        reported(None if error is None else error.str())

    try:
        producer.produce(topic, value, key, on_delivery=delivered)
        producer.poll(0)
    except (KafkaException, BufferError) as e:
        reported(str(e))


def watermarks(consumer: Consumer, topic: str, partition: int, deadline: float) -> tuple[int, int]:
    """A partition's (low, high) watermarks; a moment's trouble (a topic just created, a leader moving) is
    waited out until ``deadline`` (monotonic)."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       max(0.5, deadline - time.monotonic()), False)
            return int(low), int(high)
        except KafkaException as e:
            err: KafkaError = e.args[0]
            if err.code() in DENIED_CODES:
                raise denied(err, f"cannot read the offsets of {topic}[{partition}]") from e
            if err.code() not in TRANSIENT_READ_CODES or time.monotonic() >= deadline:
                raise KafkaUnavailableError(f"cannot read the offsets of {topic}[{partition}]: {err.str()}") from e
            time.sleep(0.1)


class Writer:
    """A plain producer behind the edge: the port a client, a worker or a tool writes records through.

    Records are queued (waiting for queue space when it is full) and delivered in the background; every
    call is translated (a refused or failed produce is the typed error ``kafka.produce_error`` says)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    def put(self, topic: str, records: Iterable[tuple[bytes, bytes, Any]], deliveries: Deliveries) -> None:
        """Queue ``(value, key, headers)`` records; their delivery failures land in ``deliveries``."""
        produce_each(self._producer, topic, records, deliveries)

    def produce(self, topic: str, value: bytes | None, key: bytes | None,
                headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
        """Queue one record (its delivery reported only if it fails: the producer's config says how)."""
        try:
            produce(self._producer, topic, value, key, headers=headers)
        except KafkaException as e:
            raise produce_error(e.args[0], f"{topic}: cannot write {key!r}") from e
        self.serve()

    def send(self, topic: str, key: bytes | None, value: bytes | None, reported: Callable[[str | None], None]) -> None:
        """Queue one record without waiting; ``reported`` hears how it went (:func:`send`)."""
        send(self._producer, topic, key, value, reported)

    def write(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]], what: str,
              timeout_s: float) -> None:
        """Write ``(key, value)`` records and wait until the brokers acknowledged each (:func:`write`)."""
        write(self._producer, topic, records, what, timeout_s)

    def serve(self) -> None:
        """Serve the delivery reports that arrived (without waiting)."""
        with translated("serving the delivery reports"):
            self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` until every record queued is delivered; how many are not."""
        with translated("waiting for the brokers' acknowledgements"):
            return int(self._producer.flush(timeout_s))


def writer(settings: Settings, config: Mapping[str, Any]) -> Writer:
    """A :class:`Writer` of the configured cluster, with librdkafka's ``config`` over its settings."""
    return Writer(producer(settings, config))


def command_writer(settings: Settings) -> Writer:
    """The client's :class:`Writer` to ``<ns>.commands`` (``kafka.command_producer``: idempotent, Java's
    partitioning, deliveries reported only when they fail)."""
    return Writer(command_producer(settings))
