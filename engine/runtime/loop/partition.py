"""One job partition this instance holds: its lifecycle, its store, its epoch and this tick's decisions.

The lifecycle is one state machine (like Kafka Streams' ``Task.State``), with one table of
allowed transitions::

    ASSIGNED ─► RESTORING ─► CLAIMING ─► ACTIVE ─► REVOKING ─► CLOSED
                    ▲                       │
                    └───── (resync) ────────┘        any ─► FENCED ─► CLOSED

Only an ACTIVE partition decides; a REVOKING one still records the results of handlers it
started. A resync (a transaction aborted, or a foreign record in the log between ours)
goes back to RESTORING and returns to ACTIVE under the same epoch once caught up.

Deciding folds at once: every event a decision stages is folded into the partition's
:class:`~projections.batch.Batch` (so the next decision sees it) and encoded; the write
step carries the tick's events in one transaction, and the apply step commits the batch
once that transaction committed.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from engine.contract import messages as m
from engine.contract.codec import encode_event
from engine.contract.headers import TRACEPARENT
from engine.contract.records import builder
from engine.domain.decide import DecideContext, Emit, Input, Send, decide
from engine.domain.fairness import FairState
from engine.domain.jobs import JobView
from engine.errors import IllegalStateError as IllegalTransition, ProjectionCorruptedError, ValidationError
from projections.batch import Batch
from projections.evolve import APPLIED, Folded, current_epoch, fold_state
from projections.profile import WRITE_MODEL, Profile
from projections.views.ended import read_ended
from projections.views.jobs import read_job
from projections.views.ready import FOLLOWED, ReadyView

if TYPE_CHECKING:  # types only: the step modules import no Kafka client and no RocksDB (engine.testing)
    from engine.runtime.kafka import Producer
    from projections.store import ProjectionStore

log = logging.getLogger("epochq.partition")

MAX_EVENT_BYTES = 1_000_000 - 16 * 1024
"""The largest event the owner stages: under the brokers' default record limit (message.max.bytes,
about 1 MB) with room for the record's headers, so a transaction never fails on a record the broker refuses."""
MAX_QUARANTINED_BYTES = 64 * 1024
"""How much of an undecodable command a CommandQuarantined keeps (its length is in the error)."""
new_event = builder(m.Event)
Headers = list[tuple[str, str | bytes | None]]
"""A record's headers, as the producer takes them."""


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


def quarantined(topic: str, partition: int, offset: int, error: str, raw: bytes | None) -> m.CommandQuarantined:
    """The event that sets an undecidable command aside, keeping at most MAX_QUARANTINED_BYTES of it."""
    raw = raw or b""
    if len(raw) > MAX_QUARANTINED_BYTES:
        error = f"{error} (the record is {len(raw)} bytes; its first {MAX_QUARANTINED_BYTES} are kept)"
        raw = raw[:MAX_QUARANTINED_BYTES]
    return m.CommandQuarantined(topic, partition, offset, error, raw)


@dataclass(slots=True)
class Staged:
    """What one partition decided in this tick: events to write, commands to send, handlers to start."""

    events: list[m.Event] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)
    folds: list[Folded] = field(default_factory=list)  # what folding each event did, in order
    commands: list[m.Command] = field(default_factory=list)
    starts: list[tuple[m.Event, JobView]] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)  # the finished attempts decided here: kept if it aborts
    outputs: list[Any] = field(default_factory=list)  # records handlers produced (loop/effects.py), with their success
    traced: dict[int, Headers] = field(default_factory=dict)
    """The record headers of the events of traced jobs, by index in ``events`` (docs/tracing.md): none for
    an untraced job, so its events are produced exactly as before."""
    first_command_offset: int | None = None
    next_command_offset: int | None = None

    def __bool__(self) -> bool:
        return bool(self.events) or bool(self.commands) or self.next_command_offset is not None

    def mark(self) -> tuple[int, int, int, int]:
        """Where the lists end now (to undo what one input staged)."""
        return len(self.events), len(self.commands), len(self.starts), len(self.outputs)

    def undo(self, mark: tuple[int, int, int, int]) -> None:
        """Forget what was staged after ``mark``."""
        events, commands, starts, outputs = mark
        del self.events[events:], self.raws[events:], self.folds[events:]
        del self.commands[commands:], self.starts[starts:], self.outputs[outputs:]
        if self.traced:
            self.traced = {i: h for i, h in self.traced.items() if i < events}

    def trace(self, start: int, traceparent: str, replace: bool = True) -> None:
        """Give the events staged from ``start`` on the W3C ``traceparent`` header (``replace=False``: only those
        that have none yet)."""
        headers: Headers = [(TRACEPARENT, traceparent.encode())]
        for i in range(start, len(self.events)):
            if replace or i not in self.traced:
                self.traced[i] = headers


def cancel_requests(staged: Staged) -> list[tuple[str, int]]:
    """The (job id, attempt) of every running attempt this tick asked to stop (``JobCancelRequested``)."""
    return [(e.job_id or "", e.body.attempt) for e in staged.events if isinstance(e.body, m.JobCancelRequested)]


Observer = Callable[[m.Event, Folded], None]


class Partition:
    """Job partition ``number`` as held by this instance under one epoch."""

    def __init__(self, number: int, owner_id: str, profile: Profile = WRITE_MODEL):
        self.number = number
        self.profile = profile  # what its store holds: the write model (projections.profile)
        self.owner_id = owner_id
        self.state = State.ASSIGNED
        self.store: ProjectionStore | None = None
        self.producer: Producer | None = None
        self.batch: Batch = None  # type: ignore[assignment]  # set when the store opens
        self.ready: ReadyView = None  # type: ignore[assignment]
        self.epoch = 0
        self.staged = Staged()
        self.fair: dict[str, FairState] = {}
        self.observer: Observer | None = None  # the time router and schedules, once active
        self.seq = 0  # events staged under this epoch: the tail of derived event ids
        self.next_offset = -1  # where our next event should land in the events partition
        self.restore_target = 0
        self.written_end = 0  # the log reaches at least here: past our newest committed transaction's marker
        self.resuming = False  # restoring after a resync: back to ACTIVE under the same epoch
        self.hold_until = 0.0  # a resync after a refused transaction decides again from this time (monotonic)
        self.refusals = 0  # transactions refused in a row for want of an ACL (engine/runtime/loop/refusals.py)
        self.committed_command_offset: int | None = None  # the commands partition is consumed up to here
        self.accept_tag = 0  # command batches the reader tagged below this are stale (before a seek)
        self.revoke_deadline = 0.0
        self.corrupt: ProjectionCorruptedError | None = None  # the store failed a read: wipe and restore it
        self.writing: Any = None  # the transaction under way (engine.runtime.loop.write.Written), if any
        self.commands: collections.deque[tuple[int, Any, bytes | None]] = collections.deque()
        """(offset, raw, signature header) of the commands to decide."""
        self.results: list[Any] = []  # finished attempts to record once no transaction is under way
        self.checkpoint_offset = -1  # the events offset of the store's newest checkpoint known here (-1: none)

    @property
    def since_checkpoint(self) -> int:
        """Offsets folded into the store since its newest checkpoint known here (loop/checkpointing.py)."""
        return self.next_offset - 1 - self.checkpoint_offset

    # --- lifecycle -----------------------------------------------------------------------

    def move(self, to: State) -> None:
        """Take one edge of the transition table."""
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"partition {self.number}: {self.state} -> {to} is not in the table")
        log.debug("partition %d: %s -> %s", self.number, self.state, to)
        self.state = to

    def open(self, store: ProjectionStore, producer: Producer) -> None:
        """The store and the producer are ready: restore from the store's applied offset."""
        self.store, self.producer = store, producer
        self.ready = ReadyView(store)
        self.batch = Batch(store, self.ready.follow, FOLLOWED, self.profile)

    @property
    def deciding(self) -> bool:
        """Whether this partition may decide (ACTIVE) or still records results (REVOKING)."""
        return self.state is State.ACTIVE or self.state is State.REVOKING

    @property
    def can_decide(self) -> bool:
        """Whether it may decide now: active or revoking, and no transaction of its own under way."""
        return self.writing is None and (self.state is State.ACTIVE or self.state is State.REVOKING)

    def drop_commands(self) -> int:
        """Forget the commands read but not decided (they are read again after a seek, or by the next owner)."""
        n = len(self.commands)
        self.commands.clear()
        return n

    def last_epoch(self) -> int:
        """The newest claim's epoch in the store."""
        return current_epoch(self.batch)

    # --- reading state -------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        """The job as this partition's decisions leave it (pending batch over store); an ended job as its
        tombstone (state, end, tenant, idempotency key) while the dedup window keeps it."""
        return read_job(self.batch, job_id) or read_ended(self.batch, job_id)

    def context(self, base: DecideContext, now: int) -> DecideContext:
        """The decide context with this partition's epoch and ``now``."""
        return DecideContext(now, self.epoch, base.max_payload_bytes, base.tasks, base.default_policy)

    # --- deciding ------------------------------------------------------------------------

    def decide(self, job_id: str | None, given: Input, ctx: DecideContext, cause: str | None = None,
               correlation: str | None = None) -> list[m.Event]:
        """Decide for one job and stage what follows; returns the staged events."""
        job = self.job(job_id) if job_id else None
        return self.take(decide(job, given, ctx), ctx.now, cause, correlation)

    def take(self, outs: list[Emit | Send], now: int, cause: str | None = None,
             correlation: str | None = None) -> list[m.Event]:
        """Stage a decision's events and commands."""
        staged = []
        for out in outs:
            if isinstance(out, Send):
                self.staged.commands.append(out.command)
            else:
                staged.append(self.stage(out, now, cause, correlation))
        return staged

    def stage(self, emit: Emit, at: int, cause: str | None = None, correlation: str | None = None) -> m.Event:
        """Wrap ``emit`` in an envelope with this partition's epoch, encode it and fold it now."""
        self.seq += 1
        event = new_event(f"{self.number}-{self.epoch}-{self.seq}", emit.job_id, emit.tenant_id, self.epoch,
                          self.owner_id, at, emit.body, cause, correlation)
        raw = encode_event(event)
        if len(raw) > MAX_EVENT_BYTES:
            raise ValidationError(f"{event.type} of job {event.job_id} is {len(raw)} bytes encoded; "
                                  f"at most {MAX_EVENT_BYTES} fit in one Kafka record")
        folded = fold_state(self.batch, event)
        staged = self.staged
        staged.events.append(event)
        staged.raws.append(raw)
        staged.folds.append(folded)
        job = folded.after or folded.before
        if job is not None and job.traceparent:
            staged.traced[len(staged.raws) - 1] = [(TRACEPARENT, job.traceparent.encode())]
        if folded.status == APPLIED and isinstance(emit.body, m.JobStarted) and folded.after is not None:
            staged.starts.append((event, folded.after))
        if self.observer is not None:
            self.observer(event, folded)
        return event

    def consumed(self, offset: int) -> None:
        """The command at ``offset`` was decided; its offset commits with this tick's transaction."""
        if self.staged.first_command_offset is None:
            self.staged.first_command_offset = offset
        self.staged.next_command_offset = offset + 1

    def attempt(self, step: Callable[..., Any], *args: Any) -> BaseException | None:
        """Run one input's step; if it raises, undo what it folded and staged and return the error."""
        mark = self.staged.mark()
        try:
            step(*args)
        except ProjectionCorruptedError as e:  # not the input's fault: the store must be restored
            self._undo(mark)
            self.corrupt = e
            return None
        except Exception as e:  # noqa: BLE001 - any step may meet a poison input; the caller records it
            self._undo(mark)
            return e
        return None

    def _undo(self, mark: tuple[int, int, int, int]) -> None:
        """Drop what one input staged: fold the tick's earlier events again into a fresh batch.

        Rare (a poison input), so nothing is journaled on the way for it: the batch holds
        exactly the fold of this tick's staged events, so folding those again rebuilds it.
        """
        self.staged.undo(mark)
        self.batch.clear()
        self.ready.clear()
        for event in self.staged.events:
            fold_state(self.batch, event)

    def take_staged(self) -> Staged:
        """Hand this tick's decisions to the writer and start afresh."""
        staged, self.staged = self.staged, Staged()
        return staged

    def keep_results(self, staged: Staged) -> None:
        """Take back the finished attempts whose decisions will never be written (an aborted transaction, a store
        wiped before writing): they are recorded again once the partition has caught up, or they would be lost
        and their jobs stay running with nothing in flight."""
        self.results[:0] = staged.results
        staged.results = []

    def forget_pending(self) -> None:
        """Drop what was decided but not committed (an aborted transaction, a resync, a step-down)."""
        self.staged = Staged()
        if self.batch is not None:
            self.batch.clear()
            self.ready.clear()
