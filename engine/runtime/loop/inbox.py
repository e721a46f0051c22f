"""Everything the loop waits for, in one queue: command batches, handler results, rebalance notes.

A :class:`CommandReader` thread owns the group consumer on ``<ns>.commands``: it consumes,
and its rebalance callbacks only record what happened (a :class:`Note` in the inbox). The
loop blocks on the inbox alone, so it wakes at once for a command, for a handler that
returned, or for a rebalance, and never runs inside ``consume()``.

A revocation note carries an event the callback waits on (up to a bound): the loop hands
the partitions back in its own steps (last results recorded and committed, stores closed)
and then sets it, so a partition leaves the group only once it is settled.

Only the reader thread touches the consumer: confluent-kafka lets one thread use a
consumer at a time, and a call from another thread waits until ``consume()`` returns. So
pauses, resumes and seeks go through the reader, between two ``consume()`` calls, and the
reader publishes the group metadata a transaction commits offsets with after each call.
Each command batch is tagged with the number of seeks applied before it was read: the
loop drops a batch's records of a partition it rewound after that batch was read.

A seek librdkafka refuses (a partition whose fetcher is between states, as during a leader
move) is tried again, and the requests behind it wait, for as long as the partition is
assigned: skipping it would drop the records between the rewind point and the fetch
position until the next restart. A rewind to the group's committed offset (a partition set up
again with a new producer: ``loop/lifecycle.py``) asks the coordinator for it first, read_committed,
so an open transaction's offsets hold it back until that transaction is settled.

The partitions the group assigns here (:attr:`CommandReader.assigned`) change in the callbacks,
before their note is put: the loop can ask whether the group still gives it a partition even
while that note waits in the inbox.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from engine.errors import KafkaUnavailableError
from engine.runtime import kafka
from engine.runtime.kafka.ports import Arrival, CommandSource

log = logging.getLogger("epochq.inbox")

MAX_BACKLOG = 5000
"""Command records the reader lets wait in the inbox before it stops consuming for a while."""

SEEK_WARN_EVERY_S = 30.0
"""How often a seek that keeps being refused is logged again."""
COMMITTED_TIMEOUT_S = 2.0
"""How long one ask for a partition's committed offset may hold the reader (it is asked again after that)."""

REVOKE_SLACK_S = 5.0
"""How long past the grace period a revocation callback waits for the loop to hand the partitions back."""


def rebalance_timeout_ms(grace_s: float) -> int:
    """The commands consumer's ``max.poll.interval.ms``, which is also the group's rebalance timeout: at least
    Kafka's default (120 s), and a minute more than a revocation callback may wait (``grace_s`` plus the slack),
    so a long grace period never gets a member thrown out of the group while it hands partitions back. Pure."""
    return max(120_000, int((grace_s + REVOKE_SLACK_S + 60.0) * 1000))


class Change(StrEnum):
    """What a rebalance callback saw."""

    ASSIGNED = "assigned"
    REVOKED = "revoked"
    LOST = "lost"


@dataclass(slots=True)
class Note:
    """One rebalance callback's record; a revocation waits for ``settled``."""

    change: Change
    partitions: list[int]
    settled: threading.Event = field(default_factory=threading.Event)


@dataclass(slots=True)
class Arrivals:
    """What reached the loop since it last looked."""

    results: list[Any] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.results) or bool(self.notes)


_COMMANDS, _RESULT, _NOTE = 0, 1, 2


@dataclass(slots=True)
class Seek:
    """A rewind of one partition the loop asked for, until the consumer took it."""

    partition: int
    offset: int | None  # None: the group's committed offset (asked when the seek is applied)
    refused: int = 0  # times librdkafka refused it
    warned_at: float = 0.0


class Inbox:
    """One queue the loop blocks on; any thread may put into it.

    Command records wait in :attr:`commands` until the loop decides them (it may take a
    tick's worth at a time); the reader stops consuming while ``MAX_BACKLOG`` of them wait.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[int, Any, Any]] = queue.SimpleQueue()
        self.commands: collections.deque[tuple[int, Arrival]] = collections.deque()  # (seek tag, record)
        self._put = 0  # command records put (by the reader)
        self._done = 0  # command records decided (by the loop)

    def put_commands(self, tag: int, messages: list[Arrival]) -> None:
        """A batch of command records, read after ``tag`` seeks."""
        self._put += len(messages)
        self._queue.put((_COMMANDS, tag, messages))

    def put_result(self, result: Any) -> None:
        """A handler's result (from any thread)."""
        self._queue.put((_RESULT, result, None))

    def wake(self) -> None:
        """Wake the loop (from any thread): a commit thread finished, or the engine is asked to stop."""
        self._queue.put((_RESULT, None, None))

    def put_note(self, note: Note) -> None:
        """A rebalance callback's record."""
        self._queue.put((_NOTE, note, None))

    def full(self) -> bool:
        """Whether enough command records wait for the reader to stop reading for a while."""
        return self._put - self._done >= MAX_BACKLOG

    def decided(self, n: int) -> None:
        """The loop decided ``n`` more command records."""
        self._done += n

    def take(self, timeout: float) -> Arrivals:
        """Results and notes waiting (commands go to :attr:`commands`), blocking up to ``timeout`` for one item."""
        out = Arrivals()
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return out
        while True:
            self._sort(item, out)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out

    def _sort(self, item: tuple[int, Any, Any], out: Arrivals) -> None:
        kind, first, second = item
        if kind == _RESULT:
            out.results.append(first)
        elif kind == _COMMANDS:
            self.commands.extend((first, msg) for msg in second)
        else:
            out.notes.append(first)


class CommandReader(threading.Thread):
    """The thread that owns the commands consumer (its :class:`CommandSource`): it reads, records rebalances, and
    seeks."""

    def __init__(self, source: CommandSource, topic: str, inbox: Inbox, revoke_wait_s: float,
                 max_messages: int = 1000):
        super().__init__(name="epochq-commands", daemon=True)
        self.source, self.topic, self.inbox = source, topic, inbox
        self.revoke_wait_s = revoke_wait_s
        self.max_messages = max_messages
        self.seeks = 0  # applied by this thread
        self._requested = 0  # asked for by the loop
        self.metadata: Any = None  # the group metadata as of the last consume()
        self.failure: BaseException | None = None
        self.assigned: frozenset[int] = frozenset()  # what the group assigns here, as of the last callback
        self._requests: queue.SimpleQueue[Callable[[], None] | Seek] = queue.SimpleQueue()
        self._pending: Seek | None = None  # a refused seek, tried again before any later request
        self._stopping = threading.Event()
        self._closed = threading.Event()

    # --- called by the loop ---------------------------------------------------------------

    def seek(self, partition: int, offset: int) -> int:
        """Ask for ``partition`` to be read again from ``offset``; the tag batches read after it carry."""
        self._requested += 1
        self._requests.put(Seek(partition, offset))
        return self._requested

    def rewind_committed(self, partition: int) -> int:
        """Ask for ``partition`` to be read again from the group's committed offset; the tag batches read after it
        carry."""
        self._requested += 1
        self._requests.put(Seek(partition, None))
        return self._requested

    def pause(self, partitions: list[int]) -> None:
        """Stop fetching ``partitions``."""
        self._requests.put(lambda: self._quietly(self.source.pause, partitions))

    def resume(self, partitions: list[int]) -> None:
        """Fetch ``partitions`` again."""
        self._requests.put(lambda: self._quietly(self.source.resume, partitions))

    def group_metadata(self) -> Any:
        """The group metadata a transaction commits consumed offsets with (as of the last consume)."""
        return self.metadata

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the group and end the thread (partitions must be settled by then)."""
        self._stopping.set()
        if self.is_alive():
            self._closed.wait(timeout)

    # --- the thread -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.source.subscribe(self._on_assign, self._on_revoke, self._on_lost)
            while not self._stopping.is_set():
                self._serve_requests()
                if self.inbox.full():
                    time.sleep(0.005)  # the loop has a backlog to decide first
                    continue
                messages = self.source.read(self.max_messages, 0.02)
                self.metadata = self.source.group_metadata()
                if messages:
                    self.inbox.put_commands(self.seeks, messages)
        except BaseException as e:  # noqa: BLE001 - the loop sees it and stops; it must not vanish
            self.failure = e
            log.error("commands reader failed: %s", e)
            self.inbox.wake()
        finally:
            self._close()

    def _serve_requests(self) -> None:
        """Apply the loop's requests in order; a refused seek holds back the ones behind it."""
        if self._pending is not None and not self._seek(self._pending):
            return
        self._pending = None
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return
            if not isinstance(request, Seek):
                request()
            elif not self._seek(request):
                self._pending = request
                return

    def _seek(self, request: Seek) -> bool:
        """Whether the seek is done with: applied, or moot because the partition left."""
        try:
            offset = request.offset if request.offset is not None else self._committed(request.partition)
            self.source.seek(request.partition, offset)
        except Exception as e:  # noqa: BLE001 - refused now; tried again while the partition is ours
            if self._assigned(request.partition):
                self._refused(request, e)
                return False
            log.info("seek of commands[%d] to %s dropped: the partition left (%s)", request.partition,
                     "its committed offset" if request.offset is None else request.offset, e)
        self.seeks += 1
        return True

    def _committed(self, partition: int) -> int:
        """The group's committed offset of ``partition`` (read_committed: stable), or the beginning if none."""
        offset = self.source.committed(partition, COMMITTED_TIMEOUT_S)
        return offset if offset >= 0 else kafka.OFFSET_BEGINNING

    def _assigned(self, partition: int) -> bool:
        try:
            return partition in self.source.assignment()
        except Exception:  # noqa: BLE001 - a consumer that cannot say: assume it still holds it, try again
            return True

    def _refused(self, request: Seek, error: Exception) -> None:
        request.refused += 1
        now = time.monotonic()
        if request.refused == 1 or now - request.warned_at >= SEEK_WARN_EVERY_S:
            request.warned_at = now
            log.warning("seek of commands[%d] to %s refused (%s); trying again (%d time(s) so far)",
                        request.partition, "its committed offset" if request.offset is None else request.offset,
                        error, request.refused)

    def _quietly(self, fn: Callable[[list[int]], None], partitions: list[int]) -> None:
        try:
            fn(partitions)
        except Exception as e:  # noqa: BLE001 - pausing a partition the group just took away is moot
            log.debug("%s of %s skipped: %s", fn.__name__, partitions, e)

    def _close(self) -> None:
        try:
            self.source.close()
        except Exception as e:  # noqa: BLE001 - leaving the group at exit: nothing else to do
            log.warning("closing the commands consumer: %s", e)
        self._closed.set()

    # --- rebalance callbacks: record, and for a revocation wait until the loop settled it ---

    def _on_assign(self, partitions: list[int]) -> None:
        # they come paused: nothing is read before the partition's claim is committed
        self.assigned = self.assigned | set(partitions)
        self.inbox.put_note(Note(Change.ASSIGNED, partitions))

    def _on_revoke(self, partitions: list[int]) -> None:
        note = Note(Change.REVOKED, partitions)
        self.assigned = self.assigned - set(note.partitions)
        self.inbox.put_note(note)
        if not self._stopping.is_set() and not note.settled.wait(self.revoke_wait_s):
            log.warning("partitions %s handed back before the loop settled them", note.partitions)

    def _on_lost(self, partitions: list[int]) -> None:
        self.assigned = self.assigned - set(partitions)
        self.inbox.put_note(Note(Change.LOST, partitions))


def reader_failed(reader: CommandReader) -> None:
    """Raise what stopped the reader thread, typed."""
    if reader.failure is not None:
        raise KafkaUnavailableError(f"the commands reader stopped: {reader.failure}") from reader.failure
