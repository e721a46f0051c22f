"""One owned partition: its store, its producer, its epoch, and what it has decided but not written.

Phases: RESTORING (catching up the events partition), CLAIMING (OwnershipClaimed written,
waiting to read it back), ACTIVE (deciding), RESYNC (an aborted transaction: catch up
again before deciding more). Only an ACTIVE owner decides or acts.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from confluent_kafka import Producer

from engine.contract import messages as m
from engine.domain.decide import DecideContext, Emit, Input, Send, decide
from engine.domain.jobs import JobView
from engine.runtime.overlay import Overlay
from projections.batch import Batch
from projections.evolve import Folded, current_epoch, fold
from projections.store import ProjectionStore
from engine.domain.fairness import FairState
from engine.domain.lanes import RUNNABLE_LANES
from projections.views import keys as k
from projections.views.breakers import BreakerRecord, all_breakers
from projections.views.counters import fair_state, read_int
from projections.views.indexes import ready_entry
from projections.views.jobs import read_job
from projections.views.ready import ReadyView


class Phase(StrEnum):
    """Where an owner is between being assigned a partition and deciding for it."""

    RESTORING = "restoring"
    CLAIMING = "claiming"
    ACTIVE = "active"
    RESYNC = "resync"


def now_us() -> int:
    """Wall-clock time in microseconds: the engine loop's clock, passed into decide."""
    return time.time_ns() // 1000


@dataclass
class Outbox:
    """Events and command offsets waiting for the partition's next transaction."""

    events: list[m.Event] = field(default_factory=list)
    commands: list[m.Command] = field(default_factory=list)
    next_command_offset: int | None = None
    first_command_offset: int | None = None
    starts: list[tuple[m.Event, JobView]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.events) or bool(self.commands) or self.next_command_offset is not None


class PartitionOwner:
    """The owner of job partition ``partition`` under one epoch."""

    def __init__(self, partition: int, owner_id: str, store: ProjectionStore, producer: Producer):
        self.partition = partition
        self.owner_id = owner_id
        self.store = store
        self.producer = producer
        self.phase = Phase.RESTORING
        self.epoch = 0
        self.restore_target = 0
        self.claim_event_id: str | None = None
        self.overlay = Overlay()
        self.outbox = Outbox()
        self.revoking = False
        self.resumed = False
        self.fair: dict[str, FairState] = {}
        self.unread_queued: dict[tuple[str, str], int] = {}
        self.ready = ReadyView(store)  # the ready queues' heads, read ahead (projections/views/ready.py)
        self.written: dict[bytes, m.Event] = {}  # our events by their bytes, until read back (no decode then)
        store.watchers.append(self.ready.on_commit)

    # --- reading state -------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        """The job as this owner's decisions leave it (overlay over store)."""
        return self.overlay.job(job_id, lambda jid: read_job(self.store, jid))

    def context(self, base: DecideContext) -> DecideContext:
        """The decide context with this owner's epoch and the current time."""
        return DecideContext(now_us(), self.epoch, base.max_payload_bytes, base.tasks, base.default_policy)

    # --- deciding ------------------------------------------------------------------------

    def decide(self, job_id: str | None, given: Input, ctx: DecideContext, cause: str | None = None,
               correlation: str | None = None) -> list[m.Event]:
        """Decide for one job; stage the resulting events (and commands) for the next transaction."""
        job = self.job(job_id) if job_id else None
        staged = []
        for out in decide(job, given, ctx):
            if isinstance(out, Send):
                self.outbox.commands.append(out.command)
            else:
                staged.append(self.stage(out, ctx.now, cause, correlation))
        return staged

    def stage(self, emit: Emit, at: int, cause: str | None = None, correlation: str | None = None) -> m.Event:
        """Wrap ``emit`` in an envelope with this owner's epoch and put it in the outbox."""
        event = m.Event(str(uuid.uuid4()), emit.job_id, emit.tenant_id, self.epoch, self.owner_id, at,
                        emit.body, cause, correlation)
        if emit.job_id:
            after = self.overlay.add(event, self.job(emit.job_id))
            if isinstance(event.body, m.JobStarted) and after is not None:
                self.outbox.starts.append((event, after))
            elif isinstance(event.body, m.JobQueued) and after is not None:
                key = (after.lane, after.tenant_id)
                self.unread_queued[key] = self.unread_queued.get(key, 0) + 1
                self.ready.add_pending(after.lane, after.tenant_id, ready_entry(after), after.job_id)
        self.outbox.events.append(event)
        return event

    def wrote(self, raw: bytes, event: m.Event) -> None:
        """``event`` was produced as ``raw``: reading those same bytes back needs no decoding."""
        self.written[raw] = event

    def read_back_event(self, raw: bytes) -> m.Event | None:
        """The event we produced as exactly ``raw`` (event ids make the bytes unique), if any."""
        return self.written.pop(raw, None)

    def consumed(self, offset: int) -> None:
        """A command at ``offset`` was decided; its offset commits with the next transaction."""
        if self.outbox.first_command_offset is None:
            self.outbox.first_command_offset = offset
        self.outbox.next_command_offset = offset + 1

    def take_outbox(self) -> Outbox:
        """Hand the outbox to the writer and start a new one."""
        box, self.outbox = self.outbox, Outbox()
        return box

    # --- reading back --------------------------------------------------------------------

    def fold(self, batch: Batch, event: m.Event, offset: int) -> Folded:
        """Fold one event read back from the log; notice our claim coming back."""
        folded = fold(batch, event, offset, self.overlay.transitions.get(event.event_id))
        if isinstance(event.body, m.JobQueued) and event.event_id in self.overlay.pending and folded.after:
            key = (folded.after.lane, folded.after.tenant_id)
            self.unread_queued[key] = self.unread_queued.get(key, 1) - 1
        self.overlay.read_back(event.event_id)
        if event.event_id == self.claim_event_id and folded.status == "applied":
            self.phase = Phase.ACTIVE
        return folded

    def load_policy_state(self, lanes: list[str]) -> list[BreakerRecord]:
        """Resume the fair-share clocks from the store (on activation); return its breakers."""
        self.fair = {lane: fair_state(self.store, lane) for lane in lanes}
        self.unread_queued.clear()
        return all_breakers(self.store)

    def queued_tenants(self, lane: str) -> list[str]:
        """Tenants with jobs queued in ``lane``, committed or decided but not yet read back."""
        tenants = dict.fromkeys(self.ready.backlogged(lane))
        tenants.update(dict.fromkeys(t for (ln, t), n in self.unread_queued.items() if ln == lane and n > 0))
        return list(tenants)

    def forget_pending(self) -> None:
        """Drop what this owner decided but did not write (an aborted transaction, a lost partition)."""
        self.overlay.clear()
        self.written.clear()
        self.ready.clear()
        self.unread_queued.clear()

    def depth(self, lane: str, tenant: str) -> tuple[int, int]:
        """Queued jobs of (the tenant in all lanes, the lane), counting decisions not yet read back."""
        tenant_depth = sum(read_int(self.store, key) for key in self._backlog_keys(tenant))
        tenant_depth += sum(n for (_, t), n in self.unread_queued.items() if t == tenant)
        lane_depth = read_int(self.store, k.lane_key(k.LANE_DEPTH, lane))
        lane_depth += sum(n for (ln, _), n in self.unread_queued.items() if ln == lane)
        return tenant_depth, lane_depth

    def _backlog_keys(self, tenant: str) -> list[bytes]:
        return [k.lane_tenant_key(k.BACKLOG, lane.value, tenant) for lane in RUNNABLE_LANES]

    def last_epoch(self) -> int:
        """The newest claim's epoch in the store (0 if the partition was never claimed)."""
        return current_epoch(Batch(self.store))
