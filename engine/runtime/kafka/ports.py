"""The Kafka edge's ports: what the code outside the edge, the loop included, holds instead of librdkafka's clients.

The source of truth for how a question, a client or a tool reads and writes the log. librdkafka's
``Consumer``, ``Producer`` and ``Message`` stay behind these small types; every call through them is
translated where it enters (``engine.runtime.kafka.errors``), so no ``KafkaException`` gets past them:

- :class:`Record` — a record read (offset, key, value, headers), never a client's error;
- :class:`TopicReader` — reads topics, by assignment and never committing (histories, audits, waits, the
  view, checkpoints, the tenants table, the pools' heartbeats) or as a remote worker's group member;
- :class:`CommandSource` — the owner's group consumer of the commands, as the loop's commands reader uses it;
- :class:`EventLog` — the owner's reader of the events, as restores and standby copies use it;
- :class:`Transaction` — one owner's transactional producer: the loop's transactions and a checkpoint;
- ``plain.Writer`` — a plain producer (the client's commands, a worker's results and heartbeats).

A refused read is ``AccessDeniedError`` naming the topic; anything else is ``KafkaUnavailableError``
(retryable), as :func:`~engine.runtime.kafka.errors.failure` says.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from engine.config import Settings
from engine.errors import AccessDeniedError, KafkaUnavailableError
from engine.runtime import kafka
from engine.runtime.kafka.errors import DENIED_CODES, denied, is_end_of_partition, read_refused, translated, typed

Headers = Any
"""A record's headers as read: a list of ``(name, value)`` pairs, or None (``kafka.header`` reads one)."""


class Record(Protocol):
    """A record read from a topic: its place, key, value and headers (the client's message, minus its error).

    The client's message fits it as it is: a read copies nothing per record."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def headers(self) -> Headers: ...


Refusal = Callable[[KafkaError, str], AccessDeniedError | None]
"""The error of a refused read of a topic (``err``, the topic); None when ``err`` is no refusal."""
Told = Callable[[str], None]
"""Hears a read's error as one line (``reading <topic>[<partition>]: <what>``)."""


def refused_read(err: KafkaError, topic: str) -> AccessDeniedError | None:
    """A reader's refused read: ``AccessDeniedError`` naming the topic; None for any other error."""
    return denied(err, f"cannot read {topic}") if err.code() in DENIED_CODES else None


def checked(messages: Iterable[Message], refused: Refusal, told: Told | None = None, topic: str = "") -> list[Record]:
    """The records among ``messages``; a refused read raised (never an empty answer instead). Any other error a
    message carries (a moment's trouble the client retries) is no record and is skipped, and so is the end of a
    partition. ``told``: hears every error but the end of a partition as one line, and none is raised (a reader
    that goes on whatever happens: the view). ``topic``: the one read, for an error that names none (a refused
    group)."""
    records: list[Record] = []
    for msg in messages:
        err = msg.error()
        if err is None:
            records.append(msg)
        elif is_end_of_partition(err):
            continue
        elif told is not None:
            told(f"reading {msg.topic() or topic}[{msg.partition()}]: {err.str()}")
        elif (refusal := refused(err, msg.topic() or topic)) is not None:
            raise refusal
    return records


READS = {"consume": "read", "poll": "read", "offsets_for_times": "look up the offsets by time of",
         "position": "read the positions in", "incremental_assign": "assign", "incremental_unassign": "unassign"}
"""How a failed call of the client is named in its error (``cannot read <topic>``), where its name would not do."""


class TopicReader:
    """Reads topics: the port every reader outside the loop holds. Most read by explicit assignment and never
    commit (:func:`topic_reader`); a remote worker's is a member of its pool's group (:func:`dispatch_reader`).

    Every call is translated and every read returns :class:`Record` s only."""

    __slots__ = ("_consumer", "_refused", "_told", "_topic")

    def __init__(self, consumer: Consumer, refused: Refusal = refused_read, told: Told | None = None,
                 topic: str = "") -> None:
        """``refused``: the error of a refused read; ``told``: hears every error of a read and none is raised
        (:func:`checked`); ``topic``: the topic a client already subscribed or assigned reads."""
        self._consumer, self._refused, self._told = consumer, refused, told
        self._topic = topic  # the topic assigned last: an error of the client's that names none is about it

    def assign(self, topic: str, starts: Mapping[int, int]) -> None:
        """Read ``topic``'s partitions from the offsets ``starts`` gives (partition -> offset), and only them."""
        self._topic = topic
        self._call("assign", topic, [TopicPartition(topic, p, offset) for p, offset in starts.items()])

    def unassign(self) -> None:
        """Read nothing any more (the reader stays, for the next assignment)."""
        self._call("unassign", "its partitions")

    def read(self, limit: int, timeout: float) -> list[Record]:
        """Up to ``limit`` records, waiting up to ``timeout`` s for ``limit`` of them."""
        return checked(self._call("consume", self._topic, limit, timeout), self._refused, self._told, self._topic)

    def read_soon(self, limit: int, timeout: float) -> list[Record]:
        """Up to ``limit`` records, returning with the first one (waiting up to ``timeout`` s for it) and what
        else has arrived by then."""
        first = self._call("poll", self._topic, timeout)
        if first is None:
            return []
        rest = self._call("consume", self._topic, limit - 1, 0) if limit > 1 else []
        return checked([first, *rest], self._refused, self._told, self._topic)

    def add(self, topic: str, partition: int, offset: int) -> None:
        """Read ``partition`` too, from ``offset`` (the others read on where they are)."""
        self._topic = topic
        self._call("incremental_assign", topic, [TopicPartition(topic, partition, offset)])

    def remove(self, topic: str, partition: int) -> None:
        """Read ``partition`` no more (the others read on)."""
        self._call("incremental_unassign", topic, [TopicPartition(topic, partition)])

    def pause_all(self) -> bool:
        """Fetch nothing more of what the group assigns now (a worker with no free slot); whether anything was."""
        assigned = self._call("assignment", "its partitions")
        if assigned:
            self._call("pause", "its partitions", assigned)
        return bool(assigned)

    def resume_all(self) -> None:
        """Fetch again what the group assigns now."""
        self._call("resume", "its partitions", self._call("assignment", "its partitions"))

    def idle(self, timeout: float) -> None:
        """Serve the group (its heartbeats and rebalances) for up to ``timeout`` s while everything is paused."""
        self._call("poll", "its partitions", timeout)

    def pause(self, topic: str, partitions: Iterable[int]) -> None:
        """Fetch nothing more of ``partitions`` (nor hold it in memory) until :meth:`resume`."""
        self._call("pause", topic, [TopicPartition(topic, p) for p in partitions])

    def resume(self, topic: str, partitions: Iterable[int]) -> None:
        """Fetch ``partitions`` again."""
        self._call("resume", topic, [TopicPartition(topic, p) for p in partitions])

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on (it wakes the client's fetcher, as a resume alone does not)."""
        self._call("seek", topic, TopicPartition(topic, partition, offset))

    def positions(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """The offset each partition will be read from next (negative: none yet)."""
        at = self._call("position", topic, [TopicPartition(topic, p) for p in partitions])
        return {tp.partition: tp.offset for tp in at}

    def partitions(self, topic: str, what: str = "read", timeout: float = 10.0, where: str = "") -> list[int]:
        """The partitions of ``topic`` (an error says ``cannot <what> <topic><where>``: ``where`` may name the
        cluster)."""
        return kafka.topic_partitions(self._consumer, topic, what, timeout, where)

    def end_offsets(self, topic: str, partitions: Iterable[int], timeout: float = 10.0) -> dict[int, int]:
        """The high watermark of each partition; a moment's trouble waited out until ``timeout``."""
        return kafka.end_offsets(self._consumer, topic, partitions, timeout)

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        """A partition's (low, high) watermarks; a moment's trouble waited out until ``timeout``."""
        from engine.runtime.kafka.plain import watermarks

        return watermarks(self._consumer, topic, partition, time.monotonic() + timeout)

    def offsets_at(self, topic: str, partitions: Sequence[int], at_ms: int, timeout: float = 10.0) -> dict[int, int]:
        """Per partition, the first offset whose record was written at or after ``at_ms`` (ms since the epoch);
        -1 when none was (Kafka's time index)."""
        found = self._call("offsets_for_times", topic, [TopicPartition(topic, p, at_ms) for p in partitions], timeout)
        return {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in found}

    def scan(self, topic: str, partition: int, start: int = 0, stop: int | None = None,
             idle_s: float = 1.0) -> Generator[tuple[int, bytes | None, bytes], None, None]:
        """(offset, key, value) of every committed record from ``start`` up to ``stop`` (or the end as it is)."""
        return kafka.scan_partition(self._consumer, topic, partition, start, stop, idle_s)

    def scan_records(self, topic: str, partition: int, start: int = 0, stop: int | None = None,
                     idle_s: float = 1.0) -> Generator[Record, None, None]:
        """:meth:`scan`'s records whole (with their headers)."""
        return kafka.scan_messages(self._consumer, topic, partition, start, stop, idle_s)

    def records_at(self, topic: str, partition: int, offsets: list[int]) -> Generator[Record, None, None]:
        """The records at the sorted ``offsets``, read in runs."""
        return kafka.messages_at(self._consumer, topic, partition, offsets)

    def store_offsets(self, topic: str, offsets: dict[int, int]) -> bool:
        """Store ``offsets`` (partition -> the next offset to read) for the group's next commit; False when a
        partition is no longer assigned (revoked meanwhile: its next reader starts where its offset was stored)."""
        return kafka.store_offsets(self._consumer, topic, offsets)

    def close(self) -> None:
        """Release the client (leaving nothing behind: the reader never committed)."""
        self._call("close", "its partitions")

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, name: str, topic: str, *args: Any) -> Any:
        """The client's call ``name``, its librdkafka error translated (a refusal names ``topic``)."""
        with translated(f"cannot {READS.get(name, name)} {topic}"):
            return getattr(self._consumer, name)(*args)


def topic_reader(settings: Settings, name: str, fetch_wait_ms: int = 20, waiter: bool = False,
                 told: Told | None = None) -> TopicReader:
    """A :class:`TopicReader` of the configured cluster (read_committed; ``name``: its group's suffix).

    ``waiter``: the reader follows a command's outcome, so a refused read says the command was sent but its
    outcome cannot be read (``errors.read_refused``). ``told``: hears each error of a read, and none is raised."""
    return TopicReader(kafka.events_reader(settings, name, fetch_wait_ms), read_refused if waiter else refused_read,
                       told)


def dispatch_reader(settings: Settings, topic: str, group: str,
                    on_revoke: Callable[[list[int]], None] | None = None) -> TopicReader:
    """A remote worker's reader of its pool's dispatch topic, a member of the pool's group
    (``kafka.dispatch_consumer``: read_committed; the offsets the worker stores, :meth:`TopicReader.store_offsets`,
    are committed every second and when it leaves). ``on_revoke`` hears the partitions the group takes away (or
    that were lost)."""
    consumer = kafka.dispatch_consumer(settings, topic, group, store_offsets=False)
    if on_revoke is not None:
        def revoked(_consumer: object, partitions: list[TopicPartition]) -> None:
            on_revoke([tp.partition for tp in partitions])

        kafka.call(consumer.subscribe, [topic], on_revoke=revoked, on_lost=revoked)
    return TopicReader(consumer, topic=topic)


def heartbeats_reader(settings: Settings, topic: str) -> TopicReader:
    """A reader of the compacted heartbeats topic from its start (``kafka.heartbeats_reader``)."""
    return TopicReader(kafka.heartbeats_reader(settings, topic), topic=topic)


Report = Callable[[Any, Any], None]
"""Hears a record's delivery: the client's error (None when delivered) and the record (a :class:`Record`)."""


class Transaction:
    """One partition owner's transactional producer: the loop's transactions (its events, the commands it sends
    itself, the handlers' records, the offsets of the commands decided) and a write of its own between them (a
    checkpoint): begin, produce, send the offsets, commit or abort. Each call translated (``FencedError`` for a
    zombie); the records go to the client as they are (nothing copied per record)."""

    __slots__ = ("_producer",)

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    def begin(self) -> None:
        """Open a transaction."""
        kafka.call(self._producer.begin_transaction)

    def produce(self, topic: str, value: bytes, key: bytes | None, partition: int,
                delivered: Callable[[int], None] | None = None, headers: Headers = None) -> None:
        """Add one record to the open transaction; ``delivered`` hears its offset once the brokers have it."""
        report = None
        if delivered is not None:
            def report(err: KafkaError | None, msg: Message) -> None:
                if err is None and msg.offset() is not None:
                    delivered(msg.offset())  # type: ignore[arg-type]  # a delivered record has its offset
        kafka.produce_owned(self._producer, topic, value, key, partition, report, headers)

    def produce_reported(self, topic: str, value: bytes, key: bytes | None, report: Report,
                         headers: Headers = None) -> None:
        """Add one record to the open transaction, to the partition the client's partitioner picks; ``report``
        hears its delivery (the client's error or None, and the record). A refusal at once is typed, its cause the
        client's (``errors.record_fault`` reads it)."""
        kafka.produce_owned(self._producer, topic, value, key, -1, report, headers)

    def produce_run(self, topic: str, partition: int, values: Sequence[bytes], keys: Sequence[bytes | None],
                    headers: Mapping[int, Headers] | None, report: Callable[[int], Report]) -> None:
        """The records ``values`` (with ``keys``; ``headers`` by index, if any) in order, to ``partition``; only the
        first and the last ask for a delivery report (``report(index)``).

        The records between them go straight to the client's ``produce`` (positional arguments, no report): the
        general path (:func:`kafka.produce_owned`) is kept for the two reports and for a full queue."""
        last = len(values) - 1
        produce = self._producer.produce
        try:
            for i, (key, raw) in enumerate(zip(keys, values)):
                header = headers.get(i) if headers else None
                if 0 < i < last:
                    try:
                        if header is None:
                            produce(topic, raw, key, partition)
                        else:
                            produce(topic, raw, key, partition, headers=header)
                        continue
                    except BufferError:
                        pass  # the producer's queue is full: the general path waits for room
                kafka.produce_owned(self._producer, topic, raw, key, partition,
                                    report(i) if i == 0 or i == last else None, header)
        except Exception as e:
            escaped = typed(e)
            if escaped is e:
                raise
            raise escaped from e

    def send_offsets(self, topic: str, partition: int, offset: int, group: object,
                     timeout: float = kafka.TXN_TIMEOUT_S) -> None:
        """Commit ``offset`` (the next to read) of ``topic``'s ``partition`` for ``group`` (its metadata,
        :meth:`CommandSource.group_metadata`) with the open transaction."""
        kafka.call(self._producer.send_offsets_to_transaction, [TopicPartition(topic, partition, offset)], group,
                   timeout)

    def flush(self, timeout: float = kafka.TXN_TIMEOUT_S) -> int:
        """Wait until the records produced are delivered (their reports heard); how many are not yet."""
        return int(kafka.call(self._producer.flush, timeout))

    def serve(self) -> None:
        """Hear the delivery reports already queued (without waiting)."""
        kafka.call(self._producer.poll, 0)

    def commit(self, timeout: float = kafka.TXN_TIMEOUT_S) -> None:
        """Commit the open transaction."""
        kafka.call(self._producer.commit_transaction, timeout)

    def abort(self, timeout: float = kafka.TXN_TIMEOUT_S) -> None:
        """Abort the open transaction."""
        kafka.call(self._producer.abort_transaction, timeout)

    def discard(self) -> None:
        """Drop what the producer still queues and close it (a producer failed for good)."""
        kafka.call(self._producer.purge)
        kafka.call(self._producer.close)


def owner_transaction(settings: Settings, partition: int) -> Transaction:
    """The owner's :class:`Transaction` of ``partition`` (``kafka.owner_producer``: initialising it fences
    zombies)."""
    return Transaction(kafka.owner_producer(settings, partition))


class Arrival(Record, Protocol):
    """A record as the commands consumer hands it over: a :class:`Record`, or the client's error in its place
    (``error()`` says which; the loop's route step skips an error). The client's message fits it as it is."""

    def error(self) -> Any: ...


Partitions = Callable[[list[int]], None]
"""Hears the partitions of a rebalance (numbers of the one topic subscribed)."""


class CommandSource:
    """The owner's group consumer of ``<ns>.commands``, as the loop's commands reader uses it: the source of truth
    for which partitions the group gives this owner and where each is read. Every call is translated; one thread
    calls it (librdkafka's rule), the rebalance callbacks run inside :meth:`read`."""

    __slots__ = ("_consumer", "_topic")

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self._consumer, self._topic = consumer, topic

    def subscribe(self, assigned: Partitions, revoked: Partitions, lost: Partitions) -> None:
        """Join the group. Partitions it assigns come paused (nothing is read before the loop resumes them) and
        ``assigned`` hears them then; ``revoked`` and ``lost`` hear the ones it takes away, and a revocation is
        done when ``revoked`` returns."""
        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            consumer.incremental_assign(partitions)
            consumer.pause(partitions)
            assigned([tp.partition for tp in partitions])

        def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            revoked([tp.partition for tp in partitions])

        def on_lost(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            lost([tp.partition for tp in partitions])

        kafka.call(self._consumer.subscribe, [self._topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def read(self, limit: int, timeout: float) -> list[Arrival]:
        """Up to ``limit`` records (the client's own, not copied), waiting up to ``timeout`` s."""
        return kafka.call(self._consumer.consume, limit, timeout)  # type: ignore[no-any-return]

    def group_metadata(self) -> object:
        """The group's metadata as of now, which a transaction commits the offsets read with (opaque)."""
        return kafka.call(self._consumer.consumer_group_metadata)

    def pause(self, partitions: list[int]) -> None:
        """Fetch nothing more of ``partitions`` until :meth:`resume`."""
        kafka.call(self._consumer.pause, [TopicPartition(self._topic, p) for p in partitions])

    def resume(self, partitions: list[int]) -> None:
        """Fetch ``partitions`` again."""
        kafka.call(self._consumer.resume, [TopicPartition(self._topic, p) for p in partitions])

    def seek(self, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on."""
        kafka.call(self._consumer.seek, TopicPartition(self._topic, partition, offset))

    def committed(self, partition: int, timeout: float) -> int:
        """The group's committed offset of ``partition`` (negative: none); a failure to say is
        ``KafkaUnavailableError``."""
        (tp,) = kafka.call(self._consumer.committed, [TopicPartition(self._topic, partition)], timeout)
        if tp.error is not None:
            raise KafkaUnavailableError(f"committed offset of {self._topic}[{partition}]: {tp.error}")
        return int(tp.offset)

    def assignment(self) -> frozenset[int]:
        """The partitions the group assigns here now."""
        return frozenset(tp.partition for tp in kafka.call(self._consumer.assignment))

    def close(self) -> None:
        """Leave the group."""
        kafka.call(self._consumer.close)


def command_source(settings: Settings, session_timeout_ms: int, max_poll_interval_ms: int) -> CommandSource:
    """The owner's :class:`CommandSource` (``kafka.commands_consumer``)."""
    return CommandSource(kafka.commands_consumer(settings, session_timeout_ms, max_poll_interval_ms),
                         settings.commands_topic)


class EventLog:
    """The owner's reader of ``<ns>.events`` (read_committed, by assignment, never committing), as the loop restores
    stores and follows standby copies with it: the source of truth for where each partition restored is read. Every
    call is translated; a read skips the client's errors (each is a moment's trouble the client retries)."""

    __slots__ = ("_consumer", "topic")

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self._consumer, self.topic = consumer, topic

    def end(self, partitions: Iterable[int]) -> dict[int, int]:
        """Each partition's end as read_committed sees it (the last stable offset); a moment's trouble waited out."""
        return kafka.end_offsets(self._consumer, self.topic, partitions)

    def add(self, partition: int, offset: int) -> None:
        """Read ``partition`` too, from ``offset`` (the others read on where they are)."""
        kafka.call(self._consumer.incremental_assign, [TopicPartition(self.topic, partition, offset)])

    def remove(self, partition: int) -> None:
        """Read ``partition`` no more."""
        kafka.call(self._consumer.incremental_unassign, [TopicPartition(self.topic, partition)])

    def read(self, limit: int, timeout: float) -> list[Record]:
        """Up to ``limit`` records of the partitions read (the client's own, not copied), waiting up to
        ``timeout`` s."""
        return [msg for msg in kafka.call(self._consumer.consume, limit, timeout) if not msg.error()]

    def position(self, partition: int) -> int | None:
        """The offset ``partition`` will be read from next; None when there is none yet."""
        offset = int(kafka.call(self._consumer.position, [TopicPartition(self.topic, partition)])[0].offset)
        return None if offset == kafka.OFFSET_INVALID else offset

    def close(self) -> None:
        """Release the client."""
        kafka.call(self._consumer.close)


def event_log(settings: Settings, name: str) -> EventLog:
    """An :class:`EventLog` of the configured cluster (``kafka.events_reader``; ``name``: its group's suffix)."""
    return EventLog(kafka.events_reader(settings, name), settings.events_topic)
