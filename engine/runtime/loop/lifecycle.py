"""Holding and giving back partitions: each one moved along its state machine.

Taking partition p (``loop/restoring.py``) opens its store and producer and folds the log in;
once p is caught up, the lifecycle stages ``OwnershipClaimed(last epoch + 1)``; once that
transaction commits, p is ACTIVE: its commands are read, its timers armed, and jobs left
running by an older epoch are re-queued (``loop/orphans.py``), but for those out with a remote
pool's workers: adopted, their leases recorded for the loop to grant (:meth:`Lifecycle.take_adopted`).
The lock is let go when the store is closed (handed back, dropped, or at exit).

After each transaction the lifecycle follows the apply step's verdict (:meth:`Lifecycle.follow`):
a claim committed activates p; an aborted or out-of-order one resyncs it (restores it from the
log, same epoch); a refused one does so after a hold that grows with the refusals in a row
(``loop/refusals.py``); a fenced one steps p down, and one that failed while handing back drops it.
One whose producer failed for good without a fence (``ProducerFailedError``) sets p up again
(:meth:`Lifecycle.recreate`): its store and producer are let go at once and, if the group still
assigns p here, p starts over as assigned (a new producer, whose initialisation settles the dead
one's transaction; a restore; a claim of the next epoch), reading its commands again from the
group's committed offset, after a delay that doubles with the set-ups in a row
(``loop/resetups.py``: 0.5 s up to 30 s; a partition active a minute starts again at 0.5 s).

Giving p back (revoked, or at shutdown): REVOKING takes no new work but records results
until p's handlers are done or the grace period ends; the attempts still running then are
re-queued by p's owner itself, saying why (``JobRequeued reason=handover|owner_stopped``,
``loop/orphans.py``: no attempt counted, and the next owner starts them at once; an attempt out
with a remote worker is left running, for the next owner to adopt); then p is
CLOSED (checkpointed first, if it folded enough: ``loop/checkpointing.py``) and the rebalance
callback waiting for it is released. A fenced or lost partition is dropped at once.

Nothing here calls back into the engine: what the loop reports on is recorded here for it
to take (:meth:`Lifecycle.take_changed`), or returned (:meth:`Lifecycle.restore`: the records a
restore found not counting).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from engine.config import Settings
from engine.contract import messages as m
from engine.domain import fence
from engine.domain.decide import DecideContext, RequeueReason
from engine.domain.jobs import JobView
from engine.domain.timerouter import Windows
from engine.errors import ProjectionCorruptedError
from engine.runtime.execution.verdicts import RunRequest
from engine.runtime.kafka.ports import EventLog
from engine.runtime.loop import core, orphans, refusals, resetups
from engine.runtime.loop.apply import NextStep, Next
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.bulk import BulkRestores
from engine.runtime.loop.checkpointing import Checkpointer
from engine.runtime.loop.inbox import Change, CommandReader, Note
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.restoring import Restoring
from engine.runtime.loop.timers import PartitionTimers
from projections.lock import holder_name
from projections.profile import owner_profile
from projections.views.indexes import running_jobs

log = logging.getLogger("epochq.lifecycle")


class Lifecycle:
    """The partitions one engine instance holds, and their way in and out."""

    def __init__(self, settings: Settings, owner_id: str, reader: CommandReader, events: EventLog,
                 board: BreakerBoard, poison: PoisonDesk, windows: Windows, grace_s: float,
                 bulk: BulkRestores | None = None, checkpointer: Checkpointer | None = None,
                 base_ctx: DecideContext = orphans.NO_POLICIES,
                 pool_of: Callable[[JobView], str | None] = lambda job: None):
        self.settings, self.owner_id = settings, owner_id
        self.pool_of = pool_of  # the remote pool a job's attempt went to (None: in process, or no remote here): adopted
        self._adopted: list[tuple[RunRequest, int, str]] = []  # remote attempts adopted (token, pool), to lease
        self.base_ctx = base_ctx  # the task policies a re-queue decides with (max_lost)
        self.profile = owner_profile(settings)  # an owner's store holds its write model
        self.reader, self.events = reader, events
        self.board, self.poison, self.windows, self.grace_s = board, poison, windows, grace_s
        self.checkpointer = checkpointer  # checkpoints a partition handed back gracefully
        self.partitions: dict[int, Partition] = {}
        self.timers: dict[int, PartitionTimers] = {}
        self._notes: list[Note] = []
        self._resetups: dict[int, int] = {}  # set-ups in a row after a producer failed unfenced (loop/resetups.py)
        self._active_since: dict[int, float] = {}  # when each partition last became active (monotonic)
        self._own_epochs: dict[int, set[int]] = {}  # the epochs this process held each partition at (activated)
        self.changed = False  # a partition was taken or given back since the loop last looked (metrics)
        self.holder = holder_name("engine", owner_id)
        self.taking = Restoring(settings, self.holder, events, bulk)  # restores too long go to processes (bulk.py)

    def take_adopted(self) -> list[tuple[RunRequest, int, str]]:
        """The remote attempts adopted since the last call (``loop/orphans.py``), each to lease from now, with the
        token its worker's heartbeats carry and the pool its start recorded."""
        adopted, self._adopted = self._adopted, []
        return adopted

    def take_changed(self) -> bool:
        """Whether a partition was taken or given back since the last call."""
        changed, self.changed = self.changed, False
        return changed

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
            self.revoke(note.partitions, self.grace_s, RequeueReason.HANDOVER)
            self._notes.append(note)
        else:
            for p in note.partitions:
                self.drop(p, "lost")
        self.changed = True

    def revoke(self, numbers: list[int], grace_s: float, reason: RequeueReason) -> None:
        """Stop taking work for ``numbers``; they close once their handlers are done or ``grace_s`` passed (what
        still runs then is re-queued with ``reason``)."""
        deadline = time.monotonic() + grace_s
        for p in numbers:
            partition = self.partitions.get(p)
            if partition is None:
                continue
            if partition.state is State.ACTIVE or (partition.writing is not None and partition.state is not
                                                   State.REVOKING):
                partition.revoke(deadline, reason)  # a transaction under way (a claim, say) ends first
            elif partition.state is not State.REVOKING:
                self.close(p)
        self.reader.pause(numbers)

    # --- taking ---------------------------------------------------------------------------------

    def set_up(self) -> None:
        """Open store and producer for assigned partitions and start restoring them (``loop/restoring.py``)."""
        self.taking.set_up(list(self.partitions.values()))

    @property
    def restoring(self) -> bool:
        """Whether a partition is being set up or restored (the loop must not sleep long)."""
        return self.taking.busy(list(self.partitions.values()))

    def restore(self, now: int, timeout: float = 0.01) -> list[tuple[int, m.Event]]:
        """Fold what the events reader brought; claim (or resume) the partitions now caught up; the records the
        restore found not counting: (partition, record), forged or a zombie's."""
        fed = self.taking.feed(self.partitions, timeout)
        for partition, error in fed.corrupt:
            self.corrupted(partition, error)
        for partition in fed.caught_up:
            if partition.resuming:
                self._resume(partition, now)
            else:
                self._claim(partition, now)
        return fed.unknown

    def _claim(self, partition: Partition, now: int) -> None:
        core.claim(partition, now)
        log.info("partition %d: claiming epoch %d as %s", partition.number, partition.epoch, self.owner_id)

    def _resume(self, partition: Partition, now: int) -> None:
        partition.resumed()
        newest = partition.draft.last_epoch()
        if not fence.counts(partition.epoch, newest):
            log.error("partition %d: the log holds a newer claim (epoch %d) than ours (%d)",
                      partition.number, newest, partition.epoch)
            self.step_down(partition.number, f"claim of epoch {newest} in the log")
            return
        self.activate(partition, now)

    def activate(self, partition: Partition, now: int) -> None:
        """The claim is committed (or a resync caught up): decide, read commands, arm timers, re-queue orphans
        (``loop/orphans.py``)."""
        own = self._own_epochs.setdefault(partition.number, set())
        activated = core.activate(partition, self.board, self.poison, self.windows, now, self.base_ctx, own,
                                  self.pool_of)
        self._active_since[partition.number] = time.monotonic()
        self.timers[partition.number] = activated.timers
        self._adopt(partition, activated.adopted)
        own.add(partition.epoch)
        self.reader.resume([partition.number])
        self.changed = True
        log.info("partition %d: active at epoch %d as %s", partition.number, partition.epoch, self.owner_id)

    def _adopt(self, partition: Partition, jobs: list[JobView]) -> None:
        """Record the leases of the remote attempts ``partition``'s new owner adopts (``loop/orphans.py``)."""
        if not jobs:
            return
        now = time.time()
        self._adopted += [(*orphans.adoption(partition.number, partition.epoch, job, now), self.pool_of(job) or "")
                          for job in jobs]
        log.info("partition %d: adopted %d attempt(s) out with remote workers at epoch %d (not re-queued): %s",
                 partition.number, len(jobs), partition.epoch, ", ".join(j.job_id for j in jobs[:5]))

    # --- when a transaction ended -----------------------------------------------------------

    def carry_out(self, partition: Partition, step: NextStep, error: Exception | None, now: int) -> None:
        """Move ``partition`` on as the apply step's verdict on its transaction says (``error``: the
        transaction's, if any); an accepted transaction ends an episode of refusals, a refused one backs off."""
        if step.next is Next.STEP_DOWN:
            self.step_down(partition.number, step.why)
        elif step.next is Next.GO_ON or step.next is Next.ACTIVATE:
            refusals.accepted(partition)
            if step.next is Next.ACTIVATE:
                self.activate(partition, now)
        elif step.next is Next.DROP:
            self.drop(partition.number, step.why)
        elif step.next is Next.RECREATE:
            self.recreate(partition, step.why)
        elif step.next is Next.BACK_OFF:
            self.resync(partition, None, step.rewind, refusals.refused(partition, error))
        else:
            self.resync(partition, step.why, step.rewind)


    def resync(self, partition: Partition, why: str | None, rewind_to: int | None = None,
               hold_until: float = 0.0) -> None:
        """Forget what is pending, read commands again from ``rewind_to``, and catch the store up from the log.

        ``why`` is logged (None: the caller said it); a claim that did not commit is made again;
        ``hold_until`` (monotonic): decide nothing before then (a refused transaction backs off)."""
        if why is not None:
            log.warning("partition %d: %s; catching up from the log", partition.number, why)
        claiming = partition.state is State.CLAIMING
        partition.draft.forget()
        self.timers.pop(partition.number, None)
        self.reader.pause([partition.number])
        offset = rewind_to if rewind_to is not None else partition.offsets.commands
        if offset is not None:
            partition.rewound(self.reader.seek(partition.number, offset))
        partition.resync(hold_until, resuming=not claiming)
        self.taking.start(partition)

    def corrupted(self, partition: Partition, error: ProjectionCorruptedError) -> None:
        """The store cannot be trusted: wipe it and restore it from offset 0 (same epoch)."""
        log.error("partition %d: projection corrupt (%s); wiping it and restoring from the log",
                  partition.number, error)
        store = partition.store
        assert store is not None
        rewind = partition.draft.staged.first_command_offset
        if partition.state not in (State.ACTIVE, State.CLAIMING, State.RESTORING):
            self.drop(partition.number, "projection corrupt while handing back")
            return
        self.taking.stop(partition.number)
        partition.open(store.reset(), partition.producer)  # type: ignore[arg-type]  # a fresh draft; its lock held
        if partition.state is State.RESTORING:
            self.taking.start(partition)
        else:
            self.resync(partition, "store wiped", rewind)

    # --- a producer that failed without a fence -----------------------------------------------

    def recreate(self, partition: Partition, why: str) -> None:
        """``partition``'s producer failed for good but no one fenced it: let its store and producer go, and take
        it again as newly assigned if the group still assigns it here (a revocation whose note still waits has
        taken it out of ``reader.assigned`` already)."""
        p, now = partition.number, time.monotonic()
        self._resetups[p] = count = resetups.in_a_row(self._resetups.get(p, 0), now - self._active_since.get(p, now))
        delay = resetups.delay_s(count)
        log.warning("partition %d: %s; setting it up again with a new producer in %.1f s (epoch %d ends here; "
                    "set-up %d in a row)", p, why, delay, partition.epoch, count)
        self.reader.pause([p])
        self.partitions.pop(p, None)
        partition.draft.forget()
        self._release(partition)
        _close_quietly(partition)
        partition.closed()  # this episode is over; a new Partition takes p again
        self.changed = True
        if p not in self.reader.assigned:
            log.info("partition %d: not set up again: the group no longer assigns it here", p)
            return
        again = self.partitions[p] = Partition(p, self.owner_id, self.profile)
        again.rewound(self.reader.rewind_committed(p))  # what was read before is read again, from there
        self.taking.defer(p, now + delay)

    # --- giving back ------------------------------------------------------------------------

    def settle_revoking(self, in_flight: Callable[[int], int], now_us: int) -> None:
        """Close revoking partitions whose handlers are done; where the grace ran out, re-queue what still runs
        first (``loop/orphans.py``, stamped ``now_us``); release waiting notes."""
        now = time.monotonic()
        for partition in [p for p in self.partitions.values() if p.state is State.REVOKING]:
            if partition.draft.staged or partition.writing is not None or partition.inbound.results:
                continue  # its last decisions are still being written
            if in_flight(partition.number) and now < partition.revoke_deadline:
                continue
            if not self._handed_back(partition, now_us):
                self.close(partition.number)
        for note in [n for n in self._notes if not any(p in self.partitions for p in n.partitions)]:
            note.settled.set()
            self._notes.remove(note)

    def _handed_back(self, partition: Partition, now_us: int) -> bool:
        """Re-queue, once, the jobs still running under ``partition``'s epoch; whether that staged anything (to be
        written before the partition closes)."""
        if partition.store is None or not partition.hand_back():
            return False
        ours = [(job_id, epoch) for job_id, epoch in running_jobs(partition.store) if epoch == partition.epoch]
        running = [job_id for job_id, _ in orphans.adopt(ours, partition.draft.job, self.pool_of)[0]]  # remote: kept
        reason = RequeueReason(partition.revoke_reason or RequeueReason.HANDOVER)
        return bool(orphans.hand_back(partition.draft, running, reason, self.poison, now_us, self.base_ctx))

    def close(self, p: int) -> None:
        """Release partition ``p`` after a clean hand-over."""
        partition = self.partitions.pop(p, None)
        self._own_epochs.pop(p, None)  # a later owner re-queues what still runs: held again, it is another's
        if partition is None:
            return
        if self.checkpointer is not None:
            self.checkpointer.on_close(partition)
        self._release(partition)
        if partition.producer is not None:
            try:
                partition.producer.flush(5)
            except Exception as e:  # noqa: BLE001 - fenced meanwhile: nothing of ours is pending anyway
                log.warning("partition %d: producer flush at hand-back failed: %s", p, e)
        partition.move(State.CLOSED)
        self.changed = True
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
        self._own_epochs.pop(p, None)
        if partition is None:
            return
        partition.draft.forget()
        self._release(partition)
        partition.closed()  # from any state: the group or the broker already took it
        self.changed = True
        log.warning("partition %d: dropped (%s) at epoch %d", p, why, partition.epoch)

    def _release(self, partition: Partition) -> None:
        self.taking.forget(partition.number)
        self.timers.pop(partition.number, None)
        if partition.store is not None:
            partition.store.close()

    def close_all(self) -> None:
        """Close whatever is still held at process exit."""
        for p in list(self.partitions):
            self.close(p)
        self.taking.close()
        for note in self._notes:
            note.settled.set()


def _close_quietly(partition: Partition) -> None:
    """Close a failed producer: what it still queued is purged; its open transaction is aborted if it still can
    be, or else by the next producer's initialisation."""
    producer = partition.let_go()  # its store is closed already
    if producer is None:
        return
    try:
        producer.discard()
    except Exception as e:  # noqa: BLE001 - it failed for good already: its replacement settles the rest
        log.debug("partition %d: closing the failed producer: %s", partition.number, e)
