"""Taking partitions, up to the moment they are caught up: store and producer opened, the log folded in.

Taking partition p: take p's store lock and open the store (the instance p came from, a
standby or a rebuild in another process may still hold it: wait, trying again every
SETUP_RETRY_S and saying so in the log every LOCKED_LOG_S), wipe it if it was folded from
another log (``projections.identity``: a cluster or a topic made again), initialise p's transactional
producer (this fences any zombie; ``loop/prepare.py`` does several side by side), then fold
``events`` p into the store up to its end (a process of its own does it when the lag is long:
``loop/bulk.py``). :meth:`Restoring.feed` returns the partitions now caught up, and those whose
store failed, and the records it found not counting (a forged or a zombie's write); the
lifecycle (``loop/lifecycle.py``) claims or resumes the first, wipes the second and hands the
records to the loop to count and report.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from engine.runtime.kafka.ports import EventLog

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.learned import skipped_line
from engine.errors import ProjectionCorruptedError, StoreLockedError
from engine.runtime.loop.bulk import BulkRestores, applied_offset_at
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.prepare import Preparer
from projections.evolve import FENCED, Folded
from projections.restore import Folder, Restorer
from projections.store import open_locked, store_path

log = logging.getLogger("epochq.lifecycle")

RESTORE_BATCH = 5000
SETUP_RETRY_S = 0.5
LOCKED_LOG_S = 30.0
"""How often a partition waiting for its store lock says so again in the log (at warning)."""


@dataclass(slots=True)
class Fed:
    """What one restore step found: partitions caught up with the log, stores that failed a read, and records that
    did not count."""

    caught_up: list[Partition] = field(default_factory=list)
    corrupt: list[tuple[Partition, ProjectionCorruptedError]] = field(default_factory=list)
    unknown: list[tuple[int, m.Event]] = field(default_factory=list)  # (partition, record): forged or a zombie's


class Restoring:
    """The partitions one engine instance is setting up and restoring, with their restorers."""

    def __init__(self, settings: Settings, holder: str, events: EventLog, bulk: BulkRestores | None = None):
        self.settings, self.holder, self.events, self.bulk = settings, holder, events, bulk
        self.preparer = Preparer(settings, holder, events)  # checkpoints loaded, producers made, side by side
        self.restorers: dict[int, Restorer] = {}
        self._unknown: list[tuple[int, m.Event]] = []  # (partition, record) folded as not counting: for Fed
        self._retry_at: dict[int, float] = {}
        self._locked_logged: dict[int, float] = {}  # partition -> when its wait for the store lock was last logged

    # --- setting up -----------------------------------------------------------------------------

    def set_up(self, partitions: list[Partition]) -> None:
        """Open store and producer for the ``partitions`` assigned and due, and start restoring them."""
        now = time.monotonic()
        due = [p for p in partitions if p.state is State.ASSIGNED and now >= self._retry_at.get(p.number, 0.0)]
        failed = self.preparer.prepare(due, lambda n: self.bulk is None or not self.bulk.busy(n)) if due else {}
        for partition in due:
            try:
                if partition.number in failed:
                    raise failed[partition.number]
                if partition.number not in self.preparer.seeded:
                    continue  # its store is a restore process's now
                if not self._in_bulk(partition.number):
                    self._set_up(partition)
            except StoreLockedError as e:
                self._wait_for_lock(partition.number, e)
            except Exception as e:  # noqa: BLE001 - e.g. the producer's initialisation timed out
                log.info("partition %d: not ready yet (%s); trying again", partition.number, e)
                self._retry_at[partition.number] = time.monotonic() + SETUP_RETRY_S

    def defer(self, p: int, until: float) -> None:
        """Set partition ``p`` up no sooner than ``until`` (monotonic)."""
        self._retry_at[p] = max(until, self._retry_at.get(p, 0.0))

    def _in_bulk(self, p: int) -> bool:
        """Whether a restore process holds ``p``'s store: one running, or one started now for a long lag."""
        bulk = self.bulk
        if bulk is None:
            return False
        if bulk.busy(p):
            return True
        if not bulk.may_begin(p):
            return False
        target = self.events.end([p])[p]
        applied = applied_offset_at(store_path(self.settings.state_dir, self.settings.namespace, p))
        return bulk.begin(p, target - applied - 1, target)

    def _wait_for_lock(self, p: int, error: StoreLockedError) -> None:
        """Another holder has p's store: try again soon, and say so now and then (never crash)."""
        now = time.monotonic()
        self._retry_at[p] = now + SETUP_RETRY_S
        if now >= self._locked_logged.get(p, 0.0):
            log.warning("partition %d: waiting for its store (%s); trying again every %.1f s",
                        p, error, SETUP_RETRY_S)
            self._locked_logged[p] = now + LOCKED_LOG_S

    def _set_up(self, partition: Partition) -> None:
        p = partition.number
        store = open_locked(store_path(self.settings.state_dir, self.settings.namespace, p), self.holder)
        store.bind(self.preparer.log_identity())  # checked against the log when seeded: it records it now
        try:
            producer = self.preparer.producer(p)
        except Exception:
            store.close()
            raise
        partition.open(store, producer)
        self._retry_at.pop(p, None)
        self._locked_logged.pop(p, None)
        try:
            self.start(partition)
        except Exception:  # e.g. the events' end unreadable while a broker is away: the retry opens afresh
            self.forget(p)
            store.close()
            partition.let_go()
            raise
        partition.move(State.RESTORING)

    # --- restoring ------------------------------------------------------------------------------

    def start(self, partition: Partition) -> None:
        """Restore ``partition``'s store from its applied offset to the events' end (and our own writes)."""
        p = partition.number
        topic = self.settings.events_topic
        end = self.events.end([p])[p]  # read_committed: the last stable offset
        partition.stands(offsets := partition.offsets.restoring(end))  # never short of our own committed writes
        restorer = Restorer(partition.store, topic, p, on_folded=self._folded_hook(p),  # type: ignore[arg-type]
                            profile=partition.profile)
        self.restorers[p] = restorer
        self.events.add(p, restorer.next_offset)
        log.info("partition %d: restoring from offset %d to %d", p, restorer.next_offset, offsets.restore_target)
        if end < offsets.written_end:
            log.warning("partition %d: the log's stable end (%d) is before our own committed events (up to %d): "
                        "waiting for it (a foreign transaction open in the events partition holds it back)",
                        p, end, offsets.written_end - 1)

    def _folded_hook(self, p: int) -> Folder:
        """The restorer's hook that keeps the records of partition ``p`` that did not count."""
        def folded(event: m.Event, verdict: Folded) -> None:
            if verdict.status == FENCED:
                self._unknown.append((p, event))
        return folded

    def busy(self, partitions: list[Partition]) -> bool:
        """Whether one of ``partitions`` is being set up or restored (the loop must not sleep long)."""
        now = time.monotonic()
        return any(p.state is State.ASSIGNED or (p.state is State.RESTORING and p.hold_until <= now)
                   for p in partitions)

    def feed(self, partitions: dict[int, Partition], timeout: float = 0.01) -> Fed:
        """Fold what the events reader brought; the partitions now caught up, the stores that failed, the records
        that did not count."""
        fed = Fed()
        if not self.restorers:
            return fed
        by_partition: dict[int, list[tuple[int, bytes | None]]] = {}
        for msg in self.events.read(RESTORE_BATCH, timeout):
            by_partition.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))  # type: ignore[arg-type]
        for p, records in by_partition.items():
            restorer = self.restorers.get(p)
            if restorer is None:
                continue
            try:
                restorer.feed(records)
            except ProjectionCorruptedError as e:  # the rest of these records is ahead of the fresh store
                fed.corrupt.append((partitions[p], e))
        wiped = {partition.number for partition, _ in fed.corrupt}  # restored afresh: not caught up now
        for p in [p for p in self.restorers if p not in wiped]:
            partition = partitions.get(p)
            if partition is not None and partition.state is State.RESTORING and \
                    partition.hold_until <= time.monotonic() and self._caught_up(partition):
                self._done(partition)
                fed.caught_up.append(partition)
        fed.unknown, self._unknown = self._unknown, []
        return fed

    def _caught_up(self, partition: Partition) -> bool:
        restorer = self.restorers[partition.number]
        target = partition.offsets.restore_target
        if restorer.next_offset >= target:
            return True
        position = self.events.position(partition.number)
        return position is not None and position >= target

    def _done(self, partition: Partition) -> None:
        p = partition.number
        restorer = self.restorers.pop(p)
        restorer.finish()
        self._unassign_events(p)
        partition.stands(partition.offsets.restored())
        if restorer.set_aside:
            log.warning("partition %d: %d record(s) set aside while restoring (undecodable or poison)",
                        p, restorer.set_aside)
        if restorer.unknown_types:
            log.warning("partition %d: %s", p, skipped_line(restorer.unknown_types))

    # --- stopping -------------------------------------------------------------------------------

    def stop(self, p: int) -> None:
        """Stop restoring ``p`` (its store is wiped, or it is let go)."""
        if self.restorers.pop(p, None) is not None:
            self._unassign_events(p)

    def forget(self, p: int) -> None:
        """``p`` is no longer held: stop its restore and its process; a later assignment starts afresh."""
        if self.bulk is not None:
            self.bulk.forget(p)
        self.preparer.forget(p)
        self.stop(p)
        self._retry_at.pop(p, None)
        self._locked_logged.pop(p, None)

    def _unassign_events(self, p: int) -> None:
        try:
            self.events.remove(p)
        except Exception as e:  # noqa: BLE001 - not assigned any more: nothing to undo
            log.debug("partition %d: events reader unassign skipped: %s", p, e)

    def close(self) -> None:
        """Kill every restore process (the instance is leaving)."""
        if self.bulk is not None:
            self.bulk.close()
