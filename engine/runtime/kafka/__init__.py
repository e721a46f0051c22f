"""The Kafka edge: client configs, and every librdkafka error translated where it enters.

Only this package imports confluent-kafka (an import-linter contract says so): it builds every
client (here; admin clients in :mod:`.admin`; the ``<ns>.schemas`` clients in :mod:`.schemas`) and
names the types the rest of the code holds (``Consumer``, ``Producer``, ``Message``,
``TopicPartition``).

The owner's calls go through :func:`call` or :func:`produce_owned`, which turn a
``KafkaException`` into the error tree of ``engine.errors``: a fenced producer (or one failed for good
without saying why) becomes ``FencedError`` (step down, never retry the write), one failed for good for another
reason ``ProducerFailedError`` (a new producer, restore, claim again), an abortable transaction error
``TransactionAbortedError`` (abort, catch up, decide again), anything else
``KafkaUnavailableError`` (retry later). Every other call is translated by :mod:`.errors`
(refused: ``AccessDeniedError``; anything else: ``KafkaUnavailableError``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING as OFFSET_BEGINNING
from confluent_kafka import OFFSET_INVALID as OFFSET_INVALID
from confluent_kafka import Consumer as Consumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as Message
from confluent_kafka import Producer as Producer
from confluent_kafka import TopicPartition as TopicPartition

from engine.config import Settings
from engine.runtime.kafka.errors import DENIED_CODES as DENIED_CODES
from engine.runtime.kafka.errors import FENCED_CODES as FENCED_CODES
from engine.runtime.kafka.errors import TRANSIENT_READ_CODES as TRANSIENT_READ_CODES
from engine.runtime.kafka.errors import denied as denied
from engine.runtime.kafka.errors import read_refused as read_refused
from engine.runtime.kafka.errors import translate as translate
from engine.runtime.kafka.errors import translated
from engine.runtime.kafka import faults
from engine.runtime.kafka.schemas import read_through
from engine.errors import (
    AccessDeniedError,
    EpochqError,
    KafkaUnavailableError,
    TopicMismatchError,
    TransactionAbortedError,
    ValidationError,
)

if TYPE_CHECKING:
    from engine.runtime.kafka.ports import Record

TXN_TIMEOUT_S = 30.0
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
PREFETCH_KB = 8 * 1024
PREFETCH_MESSAGES = 5000
"""What a consumer fetches ahead of the loop, per partition in messages and in all in kilobytes.
librdkafka's defaults (100,000 messages per partition, 64 MB) are what a backlog of millions of
commands would otherwise hold in the engine's memory."""
COMMANDS_FETCH_WAIT_MS = 100
"""How long the broker may hold the commands consumer's fetch when there is nothing to return. A command that
arrives returns it at once (``fetch.min.bytes`` is 1); the wait only bounds how soon a partition resumed or
rewound joins the fetch. At 10 ms an idle engine fetched a hundred times a second (9 ms of CPU a second)."""
FETCH_QUEUE_BACKOFF_MS = 10
"""How long librdkafka waits before fetching again once the prefetch queue passed its bounds.

Its default (1,000 ms) idles a reader that empties its queue faster than that: with 5,000
messages prefetched, reading the log capped at about 45,000 records/s (bench/restore_rate.py).
"""

TransactionAborted = TransactionAbortedError  # the name the engine's steps catch


def default_owner_id() -> str:
    """A readable, unique name for this engine instance."""
    return f"{socket.gethostname()}-{os.getpid()}"


def transactional_id(settings: Settings, partition: int) -> str:
    """The transactional.id bound to job partition ``partition``: fencing covers every write."""
    return f"{settings.namespace}.owner.p{partition}"


def owner_producer(settings: Settings, partition: int) -> Producer:
    """A transactional producer for one partition's events; initialising it fences zombies."""
    producer = faults.producer({  # the client's Producer unless a test armed a fault (faults.py)
        **settings.kafka_config(),
        "transactional.id": transactional_id(settings, partition),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 1,
        "compression.type": "lz4",
        "partitioner": "murmur2_random",  # ctx.produce's records (events name their partition): as Java's
        "transaction.timeout.ms": 60000,
        "message.max.bytes": MAX_MESSAGE_BYTES,
    })
    call(producer.init_transactions, TXN_TIMEOUT_S)
    return producer


def commands_consumer(settings: Settings, session_timeout_ms: int = 6000,
                      max_poll_interval_ms: int = 120000) -> Consumer:
    """The group consumer on ``<ns>.commands``: owning partition p means owning job partition p.

    ``max_poll_interval_ms`` is also the group's rebalance timeout: a revocation callback that waits for the
    partitions' grace period must return well within it (``loop/inbox.py``, ``rebalance_timeout_ms``).
    Its records' writer schemas resolve through ``<ns>.schemas`` (as every reader's below)."""
    read_through(settings)
    return Consumer({
        **settings.kafka_config(),
        "group.id": f"{settings.namespace}.engine",
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(500, session_timeout_ms // 4),
        "max.poll.interval.ms": max_poll_interval_ms,
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": COMMANDS_FETCH_WAIT_MS,
        "queued.max.messages.kbytes": PREFETCH_KB,
        "queued.min.messages": PREFETCH_MESSAGES,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    })


def events_reader(settings: Settings, name: str, fetch_wait_ms: int = 20) -> Consumer:
    """A consumer that reads events (read_committed) by explicit assignment, never committing.

    ``fetch_wait_ms``: how long the broker may hold a fetch at the end of the log; partitions
    newly assigned join the next fetch, so a reader that assigns often wants it short.
    A writer schema the codec does not ship is looked up in ``<ns>.schemas``."""
    read_through(settings)
    return Consumer({
        **settings.kafka_config(),
        "group.id": f"{settings.namespace}.reader.{name}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.wait.max.ms": fetch_wait_ms,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": PREFETCH_KB,
        "queued.min.messages": PREFETCH_MESSAGES,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    })


def command_producer(settings: Settings) -> Producer:
    """The client's idempotent producer to ``<ns>.commands`` with Java-compatible partitioning.

    librdkafka picks the partition (``murmur2_random``: Kafka's murmur2 of the key, in C) and
    reports deliveries only when they fail: a successful one costs no Python call.
    """
    return Producer({
        **settings.kafka_config(),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "partitioner": "murmur2_random",
        "compression.type": "lz4",
        "message.max.bytes": MAX_MESSAGE_BYTES,
        "delivery.report.only.error": True,
    })


def produce_error(err: KafkaError, what: str) -> EpochqError:
    """The typed error for a librdkafka error on a client's produce, raised or in a delivery report.

    Too large: ``ValidationError`` naming ``payload`` (fix the input); a fatal producer error, or
    anything else: ``KafkaUnavailableError`` saying what happened (retry, or a new client).
    """
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return ValidationError(f"payload: {what} is larger than Kafka accepts ({err.str()}); keep payloads under "
                               "max_payload_bytes", "payload", "payload_too_large")
    if err.fatal():
        return KafkaUnavailableError(f"{what}: the producer failed for good ({err.name()}: {err.str()}); "
                                     "close this client and create a new one")
    return KafkaUnavailableError(f"{what}: {err.name()}: {err.str()}")


def produce(producer: Producer, topic: str, value: bytes | None, key: bytes | None, partition: int = -1,
            on_delivery: Any = None, headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
    """Produce one record (to ``partition``, or -1: the producer's partitioner), waiting for queue space.

    A client's produce: its caller translates a ``KafkaException`` with :func:`produce_error`."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery,
                             headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def produce_owned(producer: Producer, topic: str, value: bytes, key: bytes | None, partition: int,
                  on_delivery: Any = None, headers: list[tuple[str, str | bytes | None]] | None = None) -> None:
    """An owner's produce inside its transaction: :func:`produce`, errors translated by :func:`translate`
    (a zombie's fatal error is ``FencedError``)."""
    try:
        produce(producer, topic, value, key, partition, on_delivery, headers)
    except KafkaException as e:
        raise translate(e) from e


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a client call, translating its librdkafka error into a typed one."""
    try:
        return fn(*args, **kwargs)
    except KafkaException as e:
        raise translate(e) from e


def topic_partitions(client: Any, topic: str, what: str, timeout: float = 10.0, where: str = "") -> list[int]:
    """The partitions of ``topic`` as the cluster sees it; refused (ACLs) or missing (`topics ensure`) typed
    (``cannot <what> <topic><where>``: ``where`` may name the cluster)."""
    with translated(f"cannot {what} {topic}{where}"):
        meta = client.list_topics(topic, timeout=timeout).topics.get(topic)
    if meta is not None and meta.error is not None and meta.error.code() in DENIED_CODES:
        raise denied(meta.error, f"cannot {what} {topic}")
    if meta is None or meta.error is not None or not meta.partitions:
        raise TopicMismatchError(f"topic {topic} is missing: run `epochq topics ensure`")
    return sorted(meta.partitions)


REFUSED_OPERATION = {
    KafkaError.GROUP_AUTHORIZATION_FAILED: "READ on group {ns}.engine (its offsets go in the transaction)",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "WRITE on transactional id {txn}",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "IDEMPOTENT_WRITE on the cluster",
}
"""What a refusal other than a topic's lacks, for :func:`explain_refusal`."""


def explain_refusal(settings: Settings, error: AccessDeniedError, topics: Sequence[str],
                    partition: int) -> AccessDeniedError:
    """A refused transaction's error naming what is missing: the operation, and the topic, group or id it is on.

    A refused topic is found by asking the brokers which of ``topics`` (those the transaction wrote)
    this principal may not WRITE; the refusal itself does not say."""
    cause = error.__cause__
    err: KafkaError | None = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
    if err is None or err.code() not in DENIED_CODES:
        return error
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        missing = unwritable_topics(settings, topics) or list(topics)
        what = f"WRITE on topic {' and '.join(missing)}"
    elif err.code() in REFUSED_OPERATION:
        what = REFUSED_OPERATION[err.code()].format(ns=settings.namespace, txn=transactional_id(settings, partition))
    else:
        what = "a login (check the credentials)"
    who = f"user {settings.sasl_username}" if settings.sasl_username else "this principal"
    return AccessDeniedError(f"the brokers refuse {who} {what} ({err.name()}): grant the engine role its ACLs "
                             "with `epochq acl apply --engine NAME` (docs/security.md)")


def unwritable_topics(settings: Settings, topics: Sequence[str]) -> list[str]:
    """The topics of ``topics`` this principal may not WRITE, as the brokers say; [] if they cannot say now."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    admin = AdminClient(settings.kafka_config())
    try:
        found = admin.describe_topics(TopicCollection(list(topics)), include_authorized_operations=True,
                                      request_timeout=10.0)
        allowed = {name: future.result().authorized_operations or [] for name, future in found.items()}
    except Exception:  # noqa: BLE001 - only an explanation: the caller names every topic instead
        return []
    return [t for t in topics if AclOperation.WRITE not in allowed.get(t, [])
            and AclOperation.ALL not in allowed.get(t, [])]


def end_offsets(consumer: Consumer, topic: str, partitions: Iterable[int], timeout: float = 10.0) -> dict[int, int]:
    """The high watermark of each partition; transient errors are retried until ``timeout``."""
    deadline = time.monotonic() + timeout
    return {p: _end_offset(consumer, TopicPartition(topic, p), deadline) for p in partitions}


def _end_offset(consumer: Consumer, tp: TopicPartition, deadline: float) -> int:
    while True:
        try:
            return int(consumer.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic()),
                                                      cached=False)[1])
        except KafkaException as e:
            err: KafkaError = e.args[0]
            if err.code() in DENIED_CODES:
                raise denied(err, f"cannot read the end of {tp.topic}[{tp.partition}]") from e
            if err.code() not in TRANSIENT_READ_CODES or time.monotonic() >= deadline:
                raise KafkaUnavailableError(f"cannot read the end of {tp.topic}[{tp.partition}]: {err.str()}") from e
            time.sleep(0.1)


def scan_partition(consumer: Consumer, topic: str, partition: int, start: int = 0,
                   stop: int | None = None,
                   idle_s: float = 1.0) -> Generator[tuple[int, bytes | None, bytes], None, None]:
    """(offset, key, value) of every committed record from ``start`` up to the end as it was."""
    messages = scan_messages(consumer, topic, partition, start, stop, idle_s)
    try:
        for msg in messages:
            yield msg.offset(), msg.key(), msg.value()  # type: ignore[misc]  # a record read has all three
    finally:
        messages.close()  # unassigns now, even when the caller stops early


def scan_messages(consumer: Consumer, topic: str, partition: int, start: int = 0, stop: int | None = None,
                  idle_s: float = 1.0) -> Generator[Message, None, None]:
    """Every committed record from ``start`` up to the end as it was, as the client's messages (with headers)."""
    end = stop if stop is not None else end_offsets(consumer, topic, [partition])[partition]
    if start >= end:
        return
    call(consumer.assign, [TopicPartition(topic, partition, start)])
    last_seen, following = time.monotonic(), start
    try:
        while time.monotonic() - last_seen < idle_s:
            # no more than the offsets left: consume() waits its whole timeout for a batch it cannot fill
            for msg in call(consumer.consume, min(SCAN_BATCH, end - following), 0.05):
                if msg.error():
                    if msg.error().code() in DENIED_CODES:  # never an empty history instead
                        raise denied(msg.error(), f"cannot read {topic}[{partition}]")
                    continue
                last_seen, following = time.monotonic(), msg.offset() + 1
                yield msg
                if following >= end:
                    return
            if call(consumer.position, [TopicPartition(topic, partition)])[0].offset >= end:
                return
    finally:
        consumer.unassign()


SCAN_BATCH = 5000
COMMITTED_WAIT_S = 30.0
"""How long a reader waits for records it knows were committed (their markers are written after the commit)."""
SEEK_GAP = 20_000
"""Reading through this many unwanted offsets costs about what a seek (a new fetch) does."""


def records_at(consumer: Consumer, topic: str, partition: int,
               offsets: list[int]) -> Generator[tuple[int, bytes], None, None]:
    """(offset, value) of the records at the sorted ``offsets``, read in runs: a gap past SEEK_GAP seeks."""
    for msg in messages_at(consumer, topic, partition, offsets):
        yield msg.offset(), msg.value()  # type: ignore[misc]  # a record read has both


def messages_at(consumer: Consumer, topic: str, partition: int, offsets: list[int]) -> Generator[Message, None, None]:
    """The records at the sorted ``offsets`` as the client's messages (with headers), read as :func:`records_at`."""
    wanted = set(offsets)
    for first, last in offset_runs(offsets, SEEK_GAP):
        messages = scan_messages(consumer, topic, partition, first, last + 1)
        try:
            for msg in messages:
                if msg.offset() in wanted:
                    yield msg
        finally:
            messages.close()


def header(msg: Record, name: str) -> str | None:
    """The value of a record's header ``name`` (the first, as text), or None if it has none."""
    headers: Any = msg.headers()
    for key, value in headers or ():
        if key == name and value is not None:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


def offset_runs(offsets: list[int], gap: int) -> list[tuple[int, int]]:
    """The sorted ``offsets`` as (first, last) runs whose neighbours lie at most ``gap`` apart."""
    runs: list[tuple[int, int]] = []
    for offset in offsets:
        if runs and offset - runs[-1][1] <= gap:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


class KafkaLog:
    """The log as ``projections.rebuild.LogReader`` sees it: committed records of one partition at a time."""

    def __init__(self, settings: Settings, name: str = "rebuild"):
        self._consumer = events_reader(settings, name)

    def end_offset(self, topic: str, partition: int) -> int:
        """The offset after the last record now."""
        return end_offsets(self._consumer, topic, [partition])[partition]

    def records(self, topic: str, partition: int, start: int, stop: int,
                committed: bool = False) -> Iterator[tuple[int, bytes | None]]:
        """``(offset, value)`` of every committed record in ``[start, stop)`` (see ``LogReader.records``)."""
        idle_s = COMMITTED_WAIT_S if committed else 1.0
        for offset, _, value in scan_partition(self._consumer, topic, partition, start, stop, idle_s):
            yield offset, value

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def heartbeats_reader(settings: Settings, topic: str) -> Consumer:
    """A consumer of the compacted heartbeats topic, assigned its one partition from the start, never committing:
    how owners learn the remote workers of each pool and renew their leases (``engine.runtime.remote.pools``)."""
    consumer = Consumer({
        **settings.kafka_config(),
        "group.id": f"{settings.namespace}.reader.heartbeats",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return consumer


def dispatch_consumer(settings: Settings, topic: str, group: str, session_timeout_ms: int = 6000,
                      store_offsets: bool = True) -> Consumer:
    """A remote worker's group consumer of its pool's dispatch topic: read_committed (a dispatch whose
    ``JobStarted`` aborted is never run), offsets committed as attempts are taken (the owner's lease, not the
    offset, decides whether an attempt runs again): each record's as it is read, or, with ``store_offsets``
    False, those the worker stores (``store_offsets``), committed every second and when it leaves."""
    read_through(settings)
    consumer = Consumer({
        **settings.kafka_config(),
        "group.id": group,
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.auto.commit": True,
        "enable.auto.offset.store": store_offsets,
        "auto.commit.interval.ms": 1000,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(500, session_timeout_ms // 4),
        "max.poll.interval.ms": 300_000,
        "fetch.wait.max.ms": 100,
        "queued.max.messages.kbytes": 1024,
    })
    consumer.subscribe([topic])
    return consumer


def store_offsets(consumer: Consumer, topic: str, offsets: dict[int, int]) -> bool:
    """Store ``offsets`` (partition -> the next offset to read) of ``topic`` for the consumer's next commit; False when
    a partition is no longer assigned (revoked meanwhile: its next reader starts where its offset was stored)."""
    try:
        consumer.store_offsets(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()])
    except KafkaException:
        return False
    return True
