"""One job partition this instance holds: its holding, its draft and its inbound queues, split by what changes together.

- its **holding** (:class:`Partition`), the lifecycle's (``loop/lifecycle.py``), changed only by its own
  methods (each step calls one; no other module writes its fields): the state machine
  below, the store and the producer, where the log and the commands partition stand (one
  :class:`Offsets` value, which the apply step returns and the restore and checkpoint steps replace),
  the transaction under way, refusals in a row, the revoke deadline;
- its **draft** (:class:`~engine.runtime.loop.draft.Draft`): the write model's transaction buffer
  the deciding steps are handed and stage into; it carries the epoch its events are stamped with;
- its **inbound** queues (:class:`Inbound`): the command records and finished attempts routed to
  it (``loop/route.py``), waiting to be decided.

The lifecycle is one state machine (like Kafka Streams' ``Task.State``), with one table of
allowed transitions::

    ASSIGNED ─► RESTORING ─► CLAIMING ─► ACTIVE ─► REVOKING ─► CLOSED
                    ▲                       │
                    └───── (resync) ────────┘        any ─► FENCED ─► CLOSED

Only an ACTIVE partition decides; a REVOKING one still records the results of handlers it
started. A resync (a transaction aborted, or a foreign record in the log between ours)
goes back to RESTORING and returns to ACTIVE under the same epoch once caught up.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from engine.errors import IllegalStateError as IllegalTransition
from engine.runtime.loop.draft import Draft
from projections.profile import WRITE_MODEL, Profile

if TYPE_CHECKING:  # types only: the step modules import no Kafka client and no RocksDB (engine.testing)
    from engine.runtime.kafka.ports import Transaction
    from engine.runtime.loop.written import Written
    from projections.store import ProjectionStore

log = logging.getLogger("epochq.partition")


class State(StrEnum):
    """Where a held partition is between being assigned and being given back."""

    ASSIGNED = "assigned"
    RESTORING = "restoring"
    CLAIMING = "claiming"
    ACTIVE = "active"
    REVOKING = "revoking"
    CLOSED = "closed"
    FENCED = "fenced"


S = State
TRANSITIONS: dict[State, frozenset[State]] = {
    S.ASSIGNED: frozenset({S.RESTORING, S.CLOSED}),
    S.RESTORING: frozenset({S.CLAIMING, S.ACTIVE, S.REVOKING, S.CLOSED, S.FENCED}),
    S.CLAIMING: frozenset({S.ACTIVE, S.RESTORING, S.REVOKING, S.CLOSED, S.FENCED}),
    S.ACTIVE: frozenset({S.RESTORING, S.REVOKING, S.CLOSED, S.FENCED}),
    S.REVOKING: frozenset({S.CLOSED, S.FENCED}),
    S.FENCED: frozenset({S.CLOSED}),
    S.CLOSED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Offsets:
    """Where a held partition stands in its events and commands partitions: one value, replaced whole by the step
    that moves it (the apply step after a transaction, the restore, a checkpoint)."""

    next_event: int = -1
    """Where our next event should land in the events partition."""
    written_end: int = 0
    """The log reaches at least here: past our newest committed transaction's commit marker."""
    restore_target: int = 0
    """A restore reads up to here: the events' end when it started, never short of ``written_end``."""
    commands: int | None = None
    """The commands partition is consumed (committed) up to here (None: as the group's committed offset says)."""
    checkpoint: int = -1
    """The events offset of the store's newest checkpoint known here (-1: none)."""

    @property
    def since_checkpoint(self) -> int:
        """Offsets folded into the store since its newest checkpoint known here (loop/checkpointing.py)."""
        return self.next_event - 1 - self.checkpoint

    def restoring(self, end: int) -> Offsets:
        """A restore starts while the events' stable end is ``end``: it reads up to there, and to our own writes."""
        return replace(self, restore_target=max(end, self.written_end))

    def restored(self) -> Offsets:
        """The restore reached its target: our next event lands there."""
        return replace(self, next_event=self.restore_target)

    def checkpointed(self, events_offset: int) -> Offsets:
        """The store's newest checkpoint is now the one at ``events_offset`` (-1: none)."""
        return replace(self, checkpoint=events_offset)


@dataclass(slots=True)
class Inbound:
    """What waits for a partition to decide it: command records, and finished attempts to record."""

    commands: collections.deque[tuple[int, Any, bytes | None]] = field(default_factory=collections.deque)
    """(offset, raw, signature header) of the commands to decide."""
    results: list[Any] = field(default_factory=list)  # finished attempts, recorded once no transaction is under way

    def take_results(self) -> list[Any]:
        """The finished attempts waiting, each once."""
        results, self.results = self.results, []
        return results

    def keep_results(self, results: list[Any]) -> None:
        """Take back finished attempts whose decisions will never be written (an aborted transaction, a store
        wiped before writing), ahead of those that arrived since: recorded again once the partition has caught up,
        or they would be lost and their jobs stay running with nothing in flight."""
        self.results[:0] = results

    def drop_commands(self) -> int:
        """Forget the commands read but not decided (they are read again after a seek, or by the next owner)."""
        n = len(self.commands)
        self.commands.clear()
        return n


class Partition:
    """Job partition ``number`` as held by this instance: its holding, its draft and its inbound queues."""

    def __init__(self, number: int, owner_id: str, profile: Profile = WRITE_MODEL):
        self.number = number
        self.profile = profile  # what its store holds: the write model (projections.profile)
        self.owner_id = owner_id
        self.draft = Draft(number, owner_id, profile)  # what this tick decides, over its store
        self.inbound = Inbound()  # what waits to be decided
        self.state = State.ASSIGNED
        self.store: ProjectionStore | None = None
        self.producer: Transaction | None = None
        self.offsets = Offsets()  # where it stands in the events and commands partitions
        self.resuming = False  # restoring after a resync: back to ACTIVE under the same epoch
        self.hold_until = 0.0  # a resync after a refused transaction decides again from this time (monotonic)
        self.refusals = 0  # transactions refused in a row for want of an ACL (engine/runtime/loop/refusals.py)
        self.accept_tag = 0  # command batches the reader tagged below this are stale (before a seek)
        self.revoke_deadline = 0.0
        self.revoke_reason = ""  # why it is given back: owner_stopped (SIGTERM) or handover (a rebalance)
        self.handed_back = False  # the attempts that outlived the grace period are re-queued (loop/orphans.py)
        self.writing: Written | None = None  # the transaction under way, if any

    @property
    def epoch(self) -> int:
        """The epoch this instance holds the partition under (its draft stamps its events with it)."""
        return self.draft.epoch

    def move(self, to: State) -> None:
        """Take one edge of the transition table."""
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"partition {self.number}: {self.state} -> {to} is not in the table")
        log.debug("partition %d: %s -> %s", self.number, self.state, to)
        self.state = to

    def revoke(self, deadline: float, reason: str) -> None:
        """Give it back: no new work; close by ``deadline`` (monotonic), what still runs re-queued with ``reason``."""
        self.move(State.REVOKING)
        self.revoke_deadline, self.revoke_reason = deadline, reason

    def hand_back(self) -> bool:
        """Whether what still runs at the end of the grace period is to be re-queued now (once: True the first
        time)."""
        first, self.handed_back = not self.handed_back, True
        return first

    def resync(self, hold_until: float, resuming: bool) -> None:
        """Restore it from the log again, deciding nothing before ``hold_until`` (monotonic); ``resuming``: back
        to ACTIVE under the same epoch once caught up (else a claim is made again)."""
        self.hold_until, self.resuming = hold_until, resuming
        self.move(State.RESTORING)

    def resumed(self) -> None:
        """Caught up after a resync: no longer resuming (it activates, or steps down)."""
        self.resuming = False

    def closed(self) -> None:
        """Closed from whatever state it was in (dropped, or set up again as a new partition)."""
        if self.state is not State.CLOSED:
            self.move(State.CLOSED)

    def refused(self) -> int:
        """One more transaction refused for want of an ACL; how many in a row now."""
        self.refusals += 1
        return self.refusals

    def accepted(self) -> int:
        """A transaction committed: how many were refused in a row before it (the count starts again)."""
        refused, self.refusals = self.refusals, 0
        return refused

    def let_go(self) -> Transaction | None:
        """Forget its store and producer (closed, or failing, elsewhere); the producer, to close."""
        producer, self.store, self.producer = self.producer, None, None
        return producer

    def rewound(self, tag: int) -> None:
        """Its commands are read again from a seek: the batches the reader tagged below ``tag`` are stale."""
        self.accept_tag = tag

    def began(self, written: Written) -> None:
        """A transaction of this partition is under way: it decides nothing more until it has ended."""
        self.writing = written

    def ended(self) -> None:
        """Its transaction under way has ended (the apply step takes it)."""
        self.writing = None

    def stands(self, offsets: Offsets) -> None:
        """Where it stands in its events and commands partitions now (after a transaction, a restore, a
        checkpoint)."""
        self.offsets = offsets

    def open(self, store: ProjectionStore, producer: Transaction) -> None:
        """The store and the producer are ready (or the store was wiped): the draft starts over it."""
        self.store, self.producer = store, producer
        self.draft.open(store)

    @property
    def deciding(self) -> bool:
        """Whether this partition may decide (ACTIVE) or still records results (REVOKING)."""
        return self.state is State.ACTIVE or self.state is State.REVOKING

    @property
    def can_decide(self) -> bool:
        """Whether it may decide now: active or revoking, and no transaction of its own under way."""
        return self.writing is None and (self.state is State.ACTIVE or self.state is State.REVOKING)
