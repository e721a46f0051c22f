"""The engine loop's steps on a virtual clock: one partition, owned at epoch 1, its log in a list.

The steps are the engine's own objects, called in the engine's order (``engine.runtime.loop.engine``)::

    results   outcomes.record: each finished attempt becomes its events (retry, dead letter, breaker)
    commands  Admission.admit: decode each command and decide it (backpressure, schedules, pauses)
    timers    PartitionTimers.tick: due jobs, schedule occurrences, breaker cool-downs, pings
    dispatch  Dispatcher.deal: free slots per lane, fairly across tenants
    commit    each staged event gets the next position in the log and its history entry; the batch commits
    start     the attempts whose JobStarted committed go to the runner: run inline for TestEngine
              (engine.testing.runner), or held for a recorded duration by a simulation

Only the Kafka transaction and RocksDB are absent: a tick's events are numbered in a list (the
log), its folded state lands in a dict (``MemoryStore``), and the commands it sends (a scoped
job's children, a schedule's occurrence) wait in a queue for the next tick. Every event is
encoded to Avro and decoded back, as a reader of the log would see it.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from engine.contract import messages as m
from engine.contract.codec import decode_event_at, encode_command
from engine.contract.partitioner import partition_for
from engine.domain.breaker import BreakerPolicy
from engine.domain.decide import DecideContext, Emit, TaskPolicy
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.domain.timerouter import SECOND, Windows
from engine.runtime.execution.verdicts import RunRequest, RunResult
from engine.runtime.loop import outcomes
from engine.runtime.loop.admit import Admission
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.dispatch import Dispatcher, rotate, slots_spoken_for
from engine.runtime.loop.options import DEFAULT_SLOTS
from engine.runtime.execution.outputs import OutputRecord
from engine.runtime.loop.draft import Draft, Staged
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.timers import PartitionTimers
from engine.errors import BusyError as BusyError  # its name here too
from engine.questions.logged import LoggedEvent
from engine.testing.store import MemoryStore
from projections.evolve import FENCED, record_position
from projections.views import keys as k
from projections.views.breakers import all_breakers
from projections.views.counters import fair_state
from projections.views.dependencies import read_reports
from projections.views.schedules import SCHEDULE_DUE

OWNER = "test-engine"
COMMANDS_TOPIC, EVENTS_TOPIC = "test.commands", "test.events"
WINDOWS = Windows(horizon_us=100 * 365 * 86_400 * SECOND, sweep_interval_us=SECOND,
                  overdue_sweep_interval_us=30 * SECOND)
"""Every timer is held in memory (a test's jobs are few), so the next due time is always known."""
MAX_TICKS = 100_000
DUE_INDEXES = (k.DUE, SCHEDULE_DUE, k.BREAKER_DUE)


@dataclass(frozen=True)
class Setup:
    """What a real engine would read from its options and the tenants table."""

    lane_slots: Mapping[Lane, int] = field(default_factory=lambda: dict(DEFAULT_SLOTS))
    lane_limits: Mapping[Lane, int] = field(default_factory=dict)
    weights: Mapping[str, float] = field(default_factory=dict)
    max_queued: Mapping[str, int] = field(default_factory=dict)
    fair: bool = True
    max_payload_bytes: int = 512 * 1024
    partitions: int = 1  # job partitions, each with its own fair queues and timers; slots are dealt to them in turn


class Runner(Protocol):
    """Where started attempts go, and when they end (virtual µs)."""

    def start(self, request: RunRequest, now: int) -> None:
        """Begin ``request``'s attempt at ``now``."""

    def finished(self, now: int) -> list[RunResult]:
        """The attempts ended by ``now``, each once."""

    def running(self, lane: Lane) -> int:
        """Attempts under way in ``lane`` (each holds a slot)."""

    def next_finish(self) -> int | None:
        """When the next attempt under way ends, or None."""


class Held:
    """One job partition held by the loop: its state, its store, its timers, its commands not yet decided."""

    def __init__(self, number: int, windows: Windows, board: BreakerBoard, poison: PoisonDesk):
        self.store = MemoryStore()
        self.partition = Partition(number, OWNER)
        self.partition.open(cast(Any, self.store), cast(Any, None))  # a ProjectionStore's interface; no producer
        self.draft: Draft = self.partition.draft  # what each tick decides, handed to the steps
        self.timers = PartitionTimers(self.draft, windows, board, poison.job)
        self.commands: collections.deque[tuple[int, bytes]] = collections.deque()
        self.sent = 0  # the next command's offset
        self.written = 0  # the next event's offset


class VirtualLoop:
    """Job partitions driven tick by tick at ``now`` (µs, UTC), which only the caller moves.

    ``policies``: the task types' retry policies and lanes (None: any task type, default policy);
    ``breakers``: the task types' circuit breakers; ``decode``: keep each event as decoded back from its
    Avro encoding (False: as decided, which a simulation of many jobs does to save the decoding)."""

    def __init__(self, setup: Setup, now: int, runner: Runner, policies: dict[str, TaskPolicy] | None,
                 breakers: Mapping[str, BreakerPolicy], decode: bool = True):
        self.settings, self.now, self.runner, self.decode = setup, now, runner, decode
        self.log: list[LoggedEvent] = []
        self.produced: list[OutputRecord] = []  # what handlers' ctx.produce wrote, with their successes
        self.by_job: dict[str, list[LoggedEvent]] = collections.defaultdict(list)
        self.poisoned: list[str] = []
        self.base_ctx = DecideContext(0, 0, setup.max_payload_bytes, policies)
        self.board = BreakerBoard(dict(breakers))
        self.poison = PoisonDesk(self.poisoned.append)
        self.held = [Held(n, WINDOWS, self.board, self.poison) for n in range(max(1, setup.partitions))]
        self.partitions = {h.partition.number: h.partition for h in self.held}
        self.admission = Admission(COMMANDS_TOPIC, len(self.held), self.base_ctx.tasks,  # type: ignore[arg-type]
                                   dict(setup.lane_limits), setup.max_queued.get, self._scope, self.poison)
        self.dispatcher = Dispatcher(self.board, self._weight, OWNER, self.poison.job, setup.fair)
        self._turn = 0
        self._idle = False  # True: nothing more happens at ``now`` until a command is sent or the clock moves
        for held in self.held:
            self._claim(held)

    @property
    def store(self) -> MemoryStore:
        """The first partition's store (TestEngine holds one partition)."""
        return self.held[0].store

    # --- taking a partition (engine.runtime.loop.lifecycle: claim, then activate) -----------------

    def _claim(self, held: Held) -> None:
        p, draft = held.partition, held.draft
        p.move(State.RESTORING)
        draft.claim(draft.last_epoch() + 1)
        draft.stage(Emit(None, None, m.OwnershipClaimed(p.number, OWNER)), self.now)
        p.move(State.CLAIMING)
        self._commit(held, draft.take_staged())
        p.move(State.ACTIVE)
        store = cast(Any, held.store)
        draft.fair = {lane.value: fair_state(store, lane.value) for lane in RUNNABLE_LANES}
        for record in all_breakers(store):
            self.board.resume(record)
        held.timers.desk.load(self.now)
        draft.observer = held.timers.observe
        held.timers.tick(draft.context(self.base_ctx, self.now))  # the first sweeps: every timer folded next is held

    # --- one tick ----------------------------------------------------------------------------

    def tick(self) -> bool:
        """Results, commands, timers, dispatch, commit, start; whether anything was decided."""
        ctxs = {h.partition.number: h.draft.context(self.base_ctx, self.now) for h in self.held}
        for result in self.runner.finished(self.now):
            self.partitions[result.request.partition].inbound.results.append(result)
        for held in self.held:
            results = held.partition.inbound.take_results()
            if results:
                outcomes.record(held.draft, results, self.board, self.poison, ctxs[held.partition.number])
        for held in self.held:
            while held.commands:
                offset, raw = held.commands.popleft()
                self.admission.admit(held.draft, offset, raw, ctxs[held.partition.number], desk=held.timers.desk)
        for held in self.held:
            held.timers.tick(ctxs[held.partition.number])
        self._dispatch(ctxs)
        decided = False
        for held in self.held:
            staged = held.draft.take_staged()
            if staged:
                decided = True
                self._commit(held, staged)
                self._start(held, staged)
        return decided

    def run_until_idle(self) -> int:
        """Tick until a tick decides nothing; how many ticks decided something."""
        for n in range(MAX_TICKS):
            if not self.tick():
                self._idle = True
                return n
        raise BusyError(f"still deciding after {MAX_TICKS} ticks at the same instant: does a handler submit "
                        "a job every time it runs?")

    def _dispatch(self, ctxs: dict[int, DecideContext]) -> None:
        """Free slots per lane, dealt to the partitions in turn (the engine's ``_dispatch``)."""
        self._turn += 1
        drafts = [h.draft for h in self.held]
        taken = slots_spoken_for([d.staged for d in drafts], [h.partition.inbound.results for h in self.held])
        for lane in RUNNABLE_LANES:
            free = self.settings.lane_slots.get(lane, 0) - self.runner.running(lane) - taken[lane.value]
            if free > 0:
                self.dispatcher.deal(lane.value, free, rotate(drafts, self._turn), lambda d: ctxs[d.number])

    def _commit(self, held: Held, staged: Staged) -> None:
        """What the write and apply steps do once a transaction committed: positions, history, the batch."""
        batch, number = held.draft.batch, held.partition.number
        for event, folded, raw in zip(staged.events, staged.folds, staged.raws):
            offset, held.written = held.written, held.written + 1
            record_position(batch, event, folded.status, offset)
            read = decode_event_at(raw, EVENTS_TOPIC, number, offset) if self.decode else event
            logged = LoggedEvent(offset, read, folded.status == FENCED)
            self.log.append(logged)
            if event.job_id:
                self.by_job[event.job_id].append(logged)
        batch.commit()
        for command in staged.commands:
            self.send(command)
        self.produced += [record for output in staged.outputs for record in output.records]

    def _start(self, held: Held, staged: Staged) -> None:
        for event, job in staged.starts:
            attempt: int = event.body.attempt  # type: ignore[union-attr]
            request = RunRequest(held.partition.number, event.epoch, job.job_id, job.tenant_id, job.task_type,
                                 attempt, Lane(job.lane), job.payload, job.idempotency_key, math.inf,
                                 job.queued_at or job.submitted_at,
                                 read_reports(held.draft.batch, job) if job.depends_on else None,
                                 job.traceparent, job.replays)
            self.runner.start(request, self.now)

    # --- around the ticks ----------------------------------------------------------------------

    def send(self, command: m.Command) -> None:
        """Queue a command for its partition's next tick, encoded as a producer would."""
        held = self.held[partition_for(command.job_id, len(self.held)) if len(self.held) > 1 else 0]
        held.commands.append((held.sent, encode_command(command)))
        held.sent += 1
        self._idle = False

    def advance_to(self, target: int) -> None:
        """Move the clock to ``target``, stopping at each due time on the way, running until idle at each."""
        if not self._idle:
            self.run_until_idle()
        while (due := self.next_due()) is not None and due <= target:
            self.now = due
            self.run_until_idle()
        if target > self.now:
            self.now, self._idle = target, False  # the clock moved: sweeps and buckets look again
            self.run_until_idle()

    def next_due(self) -> int | None:
        """The earliest time after ``now`` at which something is due: a job, a schedule, a breaker, a ping,
        a rate limit's next token, the end of an attempt under way."""
        token, self.dispatcher.wake.at = self.dispatcher.wake.at, None
        dues = [token, self.runner.next_finish()]
        for held in self.held:
            dues += [held.timers.next_due(), *(_first_due(held.store, prefix, self.now) for prefix in DUE_INDEXES)]
        later = [d for d in dues if d is not None and d > self.now]
        return min(later, default=None)

    def _weight(self, tenant: str) -> float:
        return self.settings.weights.get(tenant, 1.0)

    def _scope(self, scope: str | None) -> tuple[str, ...]:
        """A global job's tenants: those given weights (a test names its tenants)."""
        return tuple(sorted(self.settings.weights)) if scope == "global" else ()


def _first_due(store: MemoryStore, prefix: bytes, now: int) -> int | None:
    """The first due time after ``now`` in one of a store's due indexes."""
    key = next(store.keys(prefix, prefix + k.num(now + 1)), None)
    return None if key is None else int(key[len(prefix):len(prefix) + 20])
