"""Taking, holding and giving back partitions: each one moved along its state machine.

Taking partition p: take p's store lock and open the store (the instance p came from, a
standby or a rebuild in another process may still hold it: wait, trying again every
SETUP_RETRY_S and saying so in the log every LOCKED_LOG_S), initialise p's transactional
producer (this fences any zombie), restore the store to the end of ``events`` p, then stage
``OwnershipClaimed(last epoch + 1)``; once that transaction commits, p is ACTIVE: its
commands are read, its timers armed, and jobs left running by an older epoch are re-queued.
The lock is let go when the store is closed (handed back, dropped, or at exit).

Giving p back (revoked, or at shutdown): REVOKING takes no new work but records results
until p's handlers are done or the grace period ends; then p is CLOSED and the rebalance
callback waiting for it is released. A fenced or lost partition is dropped at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.learned import skipped_line
from engine.domain import fence
from engine.domain.decide import DecideContext, Emit, RequeueOrphan
from engine.domain.lanes import RUNNABLE_LANES
from engine.domain.timerouter import Windows
from engine.errors import ProjectionCorruptedError, StoreLockedError
from engine.runtime import kafka
from engine.runtime.kafka import OFFSET_INVALID, Consumer, TopicPartition
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.bulk import BulkRestores, applied_offset_at
from engine.runtime.loop.inbox import Change, CommandReader, Note
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.prepare import Preparer
from engine.runtime.loop.timers import PartitionTimers
from projections.evolve import FENCED, Folded
from projections.profile import owner_profile
from projections.restore import Restorer
from projections.lock import holder_name
from projections.store import open_locked, store_path
from projections.views import keys as k
from projections.views.breakers import all_breakers
from projections.views.counters import fair_state

log = logging.getLogger("epochq.lifecycle")

RESTORE_BATCH = 5000
SETUP_RETRY_S = 0.5
LOCKED_LOG_S = 30.0
"""How often a partition waiting for its store lock says so again in the log (at warning)."""


class Lifecycle:
    """The partitions one engine instance holds, and their way in and out."""

    def __init__(self, settings: Settings, owner_id: str, reader: CommandReader, events: Consumer,
                 board: BreakerBoard, poison: PoisonDesk, windows: Windows, grace_s: float,
                 on_change: Callable[[], None] = lambda: None,
                 on_fenced: Callable[[int, m.Event], None] | None = None, bulk: BulkRestores | None = None):
        self.settings, self.owner_id = settings, owner_id
        self.profile = owner_profile(settings)  # an owner's store holds its write model
        self.on_fenced = on_fenced  # told of each record a restore found not counting: a forged or zombie write
        self.reader, self.events = reader, events
        self.board, self.poison, self.windows, self.grace_s = board, poison, windows, grace_s
        self.on_change = on_change  # told whenever a partition is taken or given back (metrics)
        self.partitions: dict[int, Partition] = {}
        self.timers: dict[int, PartitionTimers] = {}
        self._restorers: dict[int, Restorer] = {}
        self._notes: list[Note] = []
        self._retry_at: dict[int, float] = {}
        self.bulk = bulk  # restores too long for the loop go to processes of their own (loop/bulk.py)
        self.on_close: Callable[[Partition], None] = lambda partition: None  # a graceful hand-back (checkpoints)
        self._locked_logged: dict[int, float] = {}  # partition -> when its wait for the store lock was last logged
        self.holder = holder_name("engine", owner_id)
        self.preparer = Preparer(settings, self.holder, events)  # checkpoints loaded, producers made, side by side

    # --- what the rebalance callbacks recorded ------------------------------------------------

    def note(self, note: Note) -> None:
        """Act on one rebalance note: take, give back, or drop partitions."""
        if note.change is Change.ASSIGNED:
            for p in note.partitions:
                if p not in self.partitions:
                    self.partitions[p] = Partition(p, self.owner_id, self.profile)
            log.info("assigned partitions %s", note.partitions)
        elif note.change is Change.REVOKED:
            log.info("revoking partitions %s", note.partitions)
            self.revoke(note.partitions, self.grace_s)
            self._notes.append(note)
        else:
            for p in note.partitions:
                self.drop(p, "lost")
        self.on_change()

    def revoke(self, numbers: list[int], grace_s: float) -> None:
        """Stop taking work for ``numbers``; they close once their handlers are done or ``grace_s`` passed."""
        deadline = time.monotonic() + grace_s
        for p in numbers:
            partition = self.partitions.get(p)
            if partition is None:
                continue
            if partition.state is State.ACTIVE or (partition.writing is not None and partition.state is not
                                                   State.REVOKING):
                partition.move(State.REVOKING)  # a transaction under way (a claim, say) ends first
                partition.revoke_deadline = deadline
            elif partition.state is not State.REVOKING:
                self.close(p)
        self.reader.pause(numbers)

    # --- taking ---------------------------------------------------------------------------------

    def set_up(self) -> None:
        """Open store and producer for assigned partitions and start restoring them."""
        now = time.monotonic()
        due = [p for p in self.partitions.values()
               if p.state is State.ASSIGNED and now >= self._retry_at.get(p.number, 0.0)]
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

    def _in_bulk(self, p: int) -> bool:
        """Whether a restore process holds ``p``'s store: one running, or one started now for a long lag."""
        bulk = self.bulk
        if bulk is None:
            return False
        if bulk.busy(p):
            return True
        if not bulk.may_begin(p):
            return False
        target = kafka.end_offsets(self.events, self.settings.events_topic, [p])[p]
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
        try:
            producer = self.preparer.producer(p)
        except Exception:
            store.close()
            raise
        partition.open(store, producer)
        self._retry_at.pop(p, None)
        self._locked_logged.pop(p, None)
        try:
            self._start_restore(partition)
        except Exception:  # e.g. the events' end unreadable while a broker is away: the retry opens afresh
            self._release(partition)
            partition.store = partition.producer = None
            raise
        partition.move(State.RESTORING)

    def _start_restore(self, partition: Partition) -> None:
        p = partition.number
        topic = self.settings.events_topic
        end = kafka.end_offsets(self.events, topic, [p])[p]  # read_committed: the last stable offset
        partition.restore_target = max(end, partition.written_end)  # never short of our own committed writes
        restorer = Restorer(partition.store, topic, p, on_folded=self._folded_hook(p),  # type: ignore[arg-type]
                            profile=partition.profile)
        self._restorers[p] = restorer
        kafka.call(self.events.incremental_assign, [TopicPartition(topic, p, restorer.next_offset)])
        log.info("partition %d: restoring from offset %d to %d", p, restorer.next_offset, partition.restore_target)
        if end < partition.written_end:
            log.warning("partition %d: the log's stable end (%d) is before our own committed events (up to %d): "
                        "waiting for it (a foreign transaction open in the events partition holds it back)",
                        p, end, partition.written_end - 1)

    def _folded_hook(self, p: int) -> Callable[[m.Event, Folded], None] | None:
        """The restorer's hook that reports the records of partition ``p`` that did not count."""
        hook = self.on_fenced
        if hook is None:
            return None

        def folded(event: m.Event, verdict: Folded) -> None:
            if verdict.status == FENCED:
                hook(p, event)
        return folded

    @property
    def restoring(self) -> bool:
        """Whether a partition is being set up or restored (the loop must not sleep long)."""
        now = time.monotonic()
        return any(p.state is State.ASSIGNED or (p.state is State.RESTORING and p.hold_until <= now)
                   for p in self.partitions.values())

    def restore(self, now: int, timeout: float = 0.01) -> None:
        """Fold what the events reader brought; claim (or resume) the partitions now caught up."""
        if not self._restorers:
            return
        by_partition: dict[int, list[tuple[int, bytes | None]]] = {}
        for msg in kafka.call(self.events.consume, RESTORE_BATCH, timeout):
            if not msg.error():
                by_partition.setdefault(msg.partition(), []).append((msg.offset(), msg.value()))
        for p, records in by_partition.items():
            restorer = self._restorers.get(p)
            if restorer is None:
                continue
            try:
                restorer.feed(records)
            except ProjectionCorruptedError as e:  # the rest of these records is ahead of the fresh store
                self.corrupted(self.partitions[p], e)
        for p in list(self._restorers):
            partition = self.partitions.get(p)
            if partition is not None and partition.state is State.RESTORING and \
                    partition.hold_until <= time.monotonic() and self._caught_up(partition):
                self._restored(partition, now)

    def _caught_up(self, partition: Partition) -> bool:
        restorer = self._restorers[partition.number]
        if restorer.next_offset >= partition.restore_target:
            return True
        tp = TopicPartition(self.settings.events_topic, partition.number)
        position: int = kafka.call(self.events.position, [tp])[0].offset
        return position != OFFSET_INVALID and position >= partition.restore_target

    def _restored(self, partition: Partition, now: int) -> None:
        p = partition.number
        restorer = self._restorers.pop(p)
        restorer.finish()
        self._unassign_events(p)
        partition.next_offset = partition.restore_target
        if restorer.set_aside:
            log.warning("partition %d: %d record(s) set aside while restoring (undecodable or poison)",
                        p, restorer.set_aside)
        if restorer.unknown_types:
            log.warning("partition %d: %s", p, skipped_line(restorer.unknown_types))
        if partition.resuming:
            self._resume(partition, now)
        else:
            self._claim(partition, now)

    def _claim(self, partition: Partition, now: int) -> None:
        partition.epoch = partition.last_epoch() + 1
        partition.seq = 0
        partition.stage(Emit(None, None, m.OwnershipClaimed(partition.number, self.owner_id)), now)
        partition.move(State.CLAIMING)
        log.info("partition %d: claiming epoch %d as %s", partition.number, partition.epoch, self.owner_id)

    def _resume(self, partition: Partition, now: int) -> None:
        partition.resuming = False
        newest = partition.last_epoch()
        if not fence.counts(partition.epoch, newest):
            log.error("partition %d: the log holds a newer claim (epoch %d) than ours (%d)",
                      partition.number, newest, partition.epoch)
            self.step_down(partition.number, f"claim of epoch {newest} in the log")
            return
        self.activate(partition, now)

    def activate(self, partition: Partition, now: int) -> None:
        """The claim is committed (or a resync caught up): decide, read commands, arm timers, re-queue orphans."""
        partition.move(State.ACTIVE)
        store = partition.store
        partition.fair = {lane.value: fair_state(store, lane.value) for lane in RUNNABLE_LANES}
        for record in all_breakers(store):
            self.board.resume(record)
        timers = PartitionTimers(partition, self.windows, self.board, self.poison.job)
        timers.desk.load(now)
        self.timers[partition.number] = timers
        partition.observer = timers.observe
        self._requeue_orphans(partition, now)
        self.reader.resume([partition.number])
        self.on_change()
        log.info("partition %d: active at epoch %d as %s", partition.number, partition.epoch, self.owner_id)

    def _requeue_orphans(self, partition: Partition, now: int) -> None:
        """Put back jobs that were running under an older epoch (at-least-once)."""
        ctx = DecideContext(now, partition.epoch)
        orphans = [key[len(k.RUNNING):].decode() for key, epoch in partition.store.scan(k.RUNNING)  # type: ignore[union-attr]
                   if fence.older(int(epoch), partition.epoch)]
        for job_id in orphans:
            error = partition.attempt(partition.decide, job_id, RequeueOrphan(job_id), ctx)
            if error is not None:
                self.poison.job(partition, job_id, error, ctx, "requeue")
        if orphans:
            log.info("partition %d: requeued %d jobs left running by epoch < %d", partition.number, len(orphans),
                     partition.epoch)

    # --- when a transaction did not go as planned -------------------------------------------

    def resync(self, partition: Partition, why: str | None, rewind_to: int | None = None,
               hold_until: float = 0.0) -> None:
        """Forget what is pending, read commands again from ``rewind_to``, and catch the store up from the log.

        ``why`` is logged (None: the caller said it); a claim that did not commit is made again;
        ``hold_until`` (monotonic): decide nothing before then (a refused transaction backs off)."""
        if why is not None:
            log.warning("partition %d: %s; catching up from the log", partition.number, why)
        claiming = partition.state is State.CLAIMING
        partition.hold_until = hold_until
        partition.forget_pending()
        self.timers.pop(partition.number, None)
        partition.observer = None
        self.reader.pause([partition.number])
        offset = rewind_to if rewind_to is not None else partition.committed_command_offset
        if offset is not None:
            partition.accept_tag = self.reader.seek(partition.number, offset)
        partition.resuming = not claiming
        partition.move(State.RESTORING)
        self._start_restore(partition)

    def corrupted(self, partition: Partition, error: ProjectionCorruptedError) -> None:
        """The store cannot be trusted: wipe it and restore it from offset 0 (same epoch)."""
        log.error("partition %d: projection corrupt (%s); wiping it and restoring from the log",
                  partition.number, error)
        store = partition.store
        assert store is not None
        partition.corrupt = None
        rewind = partition.staged.first_command_offset
        if partition.state not in (State.ACTIVE, State.CLAIMING, State.RESTORING):
            self.drop(partition.number, "projection corrupt while handing back")
            return
        partition.forget_pending()
        if self._restorers.pop(partition.number, None) is not None:
            self._unassign_events(partition.number)
        partition.open(store.reset(), partition.producer)  # type: ignore[arg-type]  # its lock held throughout
        if partition.state is State.RESTORING:
            self._start_restore(partition)
        else:
            self.resync(partition, "store wiped", rewind)

    # --- giving back ------------------------------------------------------------------------

    def settle_revoking(self, in_flight: Callable[[int], int]) -> None:
        """Close revoking partitions whose handlers are done (or whose grace ran out); release waiting notes."""
        now = time.monotonic()
        for partition in [p for p in self.partitions.values() if p.state is State.REVOKING]:
            if partition.staged or partition.writing is not None or partition.results:
                continue  # its last decisions are still being written
            if not in_flight(partition.number) or now >= partition.revoke_deadline:
                self.close(partition.number)
        for note in [n for n in self._notes if not any(p in self.partitions for p in n.partitions)]:
            note.settled.set()
            self._notes.remove(note)

    def close(self, p: int) -> None:
        """Release partition ``p`` after a clean hand-over."""
        partition = self.partitions.pop(p, None)
        if partition is None:
            return
        self.on_close(partition)
        self._release(partition)
        if partition.producer is not None:
            try:
                partition.producer.flush(5)
            except Exception as e:  # noqa: BLE001 - fenced meanwhile: nothing of ours is pending anyway
                log.warning("partition %d: producer flush at hand-back failed: %s", p, e)
        partition.move(State.CLOSED)
        self.on_change()
        log.info("partition %d: handed back at epoch %d", p, partition.epoch)

    def step_down(self, p: int, why: str) -> None:
        """A newer owner holds ``p``: drop its state at once and write nothing more for it."""
        partition = self.partitions.get(p)
        if partition is not None and partition.state is not State.FENCED:
            partition.move(State.FENCED)
        self.drop(p, why)

    def drop(self, p: int, why: str) -> None:
        """Forget partition ``p`` at once (lost or fenced): no more writes, ever, from this holder."""
        partition = self.partitions.pop(p, None)
        if partition is None:
            return
        partition.forget_pending()
        self._release(partition)
        if partition.state is not State.CLOSED:
            partition.state = State.CLOSED  # from any state: the group or the broker already took it
        self.on_change()
        log.warning("partition %d: dropped (%s) at epoch %d", p, why, partition.epoch)

    def _release(self, partition: Partition) -> None:
        p = partition.number
        if self.bulk is not None:
            self.bulk.forget(p)
        self.preparer.forget(p)
        self.timers.pop(p, None)
        if self._restorers.pop(p, None) is not None:
            self._unassign_events(p)
        self._retry_at.pop(p, None)
        self._locked_logged.pop(p, None)
        if partition.store is not None:
            partition.store.close()

    def _unassign_events(self, p: int) -> None:
        try:
            self.events.incremental_unassign([TopicPartition(self.settings.events_topic, p)])
        except Exception as e:  # noqa: BLE001 - not assigned any more: nothing to undo
            log.debug("partition %d: events reader unassign skipped: %s", p, e)

    def close_all(self) -> None:
        """Close whatever is still held at process exit."""
        for p in list(self.partitions):
            self.close(p)
        if self.bulk is not None:
            self.bulk.close()
        for note in self._notes:
            note.settled.set()
