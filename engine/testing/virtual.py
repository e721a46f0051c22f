"""The loop's in-memory ports: the engine's own tick (``engine.runtime.loop.core``) on a virtual clock.

:class:`VirtualLoop` is the :class:`~engine.runtime.loop.core.Ports` of ``TestEngine`` and ``epochq simulate``:
the core, its steps and their order are the engine's; only what they read from and hand to differs:

    the log       each partition's commands and events in lists: an event's offset is where a reader of
                  the log finds it (a transaction's commit marker takes one offset, as in Kafka); a
                  transaction commits when it is written, and is applied at the next tick, as the engine does
    the store     a dict per partition (``MemoryStore``)
    the clock     ``now`` (µs, UTC), which only the caller moves
    the executor  a runner: handlers called inline for TestEngine (engine.testing.runner), or an attempt
                  holding its slot for a recorded duration in a simulation

No rebalances, no restores: each partition is claimed at epoch 1 when the loop is made. Every event
is encoded to Avro and decoded back, as a reader of the log would see it (``decode=False``: kept as
decided, which a simulation of many jobs does to save the decoding). A running attempt is not
cancelled (an inline one has ended before its cancel is decided).
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
from engine.domain.decide import DecideContext, TaskPolicy
from engine.domain.lanes import Lane
from engine.domain.timerouter import SECOND, Windows
from engine.errors import BusyError as BusyError  # its name here too
from engine.errors import IllegalStateError
from engine.questions.logged import LoggedEvent
from engine.runtime.execution.outputs import OutputRecord
from engine.runtime.execution.verdicts import RunRequest, RunResult
from engine.runtime.loop import core
from engine.runtime.loop.apply import Next
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.core import Applied, Core, Read, Rules
from engine.runtime.loop.deciding import Decided
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.options import DEFAULT_SLOTS
from engine.runtime.loop.partition import Offsets, Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.route import Routed
from engine.runtime.loop.written import Written
from engine.testing.store import MemoryStore
from projections.evolve import FENCED
from projections.views import keys as k
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


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One command record of the in-memory commands partitions, as the route step reads a Kafka message."""

    number: int
    at: int
    raw: bytes

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self.number

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return self.raw

    def headers(self) -> None:
        return None


def rules(setup: Setup, base: DecideContext) -> Rules:
    """What an engine of ``setup`` decides by; a global job's tenants are those given weights (a test names its
    tenants)."""
    weights = setup.weights
    everyone = tuple(sorted(weights))
    return Rules(COMMANDS_TOPIC, max(1, setup.partitions), base, OWNER, dict(setup.lane_limits),
                 lambda tenant: weights.get(tenant, 1.0), setup.max_queued.get,
                 lambda scope: everyone if scope == "global" else (), setup.fair)


class VirtualLoop:
    """Job partitions driven by the engine's tick at ``now`` (µs, UTC), which only the caller moves.

    ``policies``: the task types' retry policies and lanes (None: any task type, default policy);
    ``breakers``: the task types' circuit breakers."""

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
        self.count = max(1, setup.partitions)
        self.stores = [MemoryStore() for _ in range(self.count)]
        self.core = Core(core.decider(rules(setup, self.base_ctx), self.board, self.poison, self._free_slots,
                                      admit_budget_s=None),  # a virtual clock does not move while a tick decides
                         timeout_of=lambda task_type: math.inf)
        self.commands: list[list[bytes]] = [[] for _ in range(self.count)]  # the commands partitions
        self._read_at = [0] * self.count  # where the reader stands in each
        self._tag = 0  # the reader's seek tag (loop/route.py)
        self._next_event = [0] * self.count  # the next offset in each events partition
        self._token_due: int | None = None  # when a rate-limited job's next token is due (µs)
        self._busy = False  # the last read brought something
        self._idle = False  # True: nothing more happens at ``now`` until a command is sent or the clock moves
        for n, store in enumerate(self.stores):
            self._claim(n, store)
        self.run_until_idle()  # the claims commit: every partition is active

    @property
    def store(self) -> MemoryStore:
        """The first partition's store (TestEngine holds one partition)."""
        return self.stores[0]

    def _claim(self, number: int, store: MemoryStore) -> None:
        partition = self.core.partitions[number] = Partition(number, OWNER)
        partition.open(cast(Any, store), cast(Any, None))  # a ProjectionStore's interface; no producer
        partition.move(State.RESTORING)
        partition.stands(Offsets(next_event=0))  # an empty log: restored at once
        core.claim(partition, self.now)

    # --- driving the tick -------------------------------------------------------------------------

    def tick(self) -> bool:
        """One tick of the engine's loop; whether anything happened (read, applied or written)."""
        return core.tick(self.core, self) > 0 or self._busy

    def run_until_idle(self) -> int:
        """Tick until a tick does nothing; how many ticks did something."""
        for n in range(MAX_TICKS):
            if not self.tick():
                self._idle = True
                return n
        raise BusyError(f"still deciding after {MAX_TICKS} ticks at the same instant: does a handler submit "
                        "a job every time it runs?")

    # --- the ports (engine.runtime.loop.core.Ports) ----------------------------------------------

    def clock(self) -> int:
        return self.now

    def read(self) -> Read:
        """The command records not read yet (with the reader's tag), and the attempts ended by ``now``."""
        records: list[tuple[int, Any]] = []
        for n, raws in enumerate(self.commands):
            start, self._read_at[n] = self._read_at[n], len(raws)
            records += [(self._tag, MemoryRecord(n, at, raws[at])) for at in range(start, len(raws))]
        results = self.runner.finished(self.now)
        self._busy = bool(records) or bool(results)
        return Read(records, results)

    def hold(self, read: Read, now: int) -> None:
        """Nothing changes hands in memory."""

    def routed(self, routed: Routed) -> None:
        """Read a partition's commands again from where the route step asks."""
        for rewind in routed.rewinds:
            self._tag += 1
            self._read_at[rewind.partition] = rewind.offset
            self.core.partitions[rewind.partition].rewound(self._tag)

    def finished(self, ended: list[Written]) -> None:
        """Nothing to collect: a transaction in memory ends as it is written."""

    def applied(self, applied: Applied, now: int) -> None:
        """A claim committed: the partition is active (the only verdicts a log in memory gives)."""
        partition, step = applied.written.partition, applied.step
        if step.next is Next.ACTIVATE:
            activated = core.activate(partition, self.board, self.poison, WINDOWS, now, self.base_ctx)
            self.core.timers[partition.number] = activated.timers
        elif step.next is not Next.GO_ON or applied.corrupt is not None:
            raise IllegalStateError(f"partition {partition.number}: {step.verdict} in memory ({step.why})")

    def start(self, starts: list[RunRequest]) -> None:
        for request in starts:
            self.runner.start(request, self.now)

    def progress(self) -> list[tuple[RunRequest, float | None, str]]:
        return []

    def decided(self, decided: Decided) -> None:
        self._token_due = decided.wake_at

    def write(self, work: list[tuple[Partition, Staged]]) -> list[Written]:
        """Each partition's transaction, committed at once: its events in the log, its commands sent."""
        return [self._write(partition, staged) for partition, staged in work]

    def _write(self, partition: Partition, staged: Staged) -> Written:
        number = partition.number
        first = self._next_event[number]
        for offset, (event, folded, raw) in enumerate(zip(staged.events, staged.folds, staged.raws), first):
            read = decode_event_at(raw, EVENTS_TOPIC, number, offset) if self.decode else event
            logged = LoggedEvent(offset, read, folded.status == FENCED)
            self.log.append(logged)
            if event.job_id:
                self.by_job[event.job_id].append(logged)
        n = len(staged.events)
        if n:
            self._next_event[number] = first + n + 1  # the transaction's commit marker takes one offset
        for command in staged.commands:
            self.send(command)
        self.produced += [record for output in staged.outputs for record in output.records]
        return Written(partition, staged, first=first if n else None, last=first + n - 1 if n else None)

    def settle(self, taking: bool, now: int) -> None:
        """Nothing is handed back in memory."""

    def timed(self, apply_s: float, decide_s: float, write_s: float) -> None:
        """No metrics in memory."""

    # --- around the ticks ----------------------------------------------------------------------

    def send(self, command: m.Command) -> None:
        """Append a command to its partition of the commands log, encoded as a producer would."""
        number = partition_for(command.job_id, self.count) if self.count > 1 else 0
        self.commands[number].append(encode_command(command))
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
        token, self._token_due = self._token_due, None
        dues = [token, self.runner.next_finish()]
        dues += [t.next_due() for t in self.core.timers.values()]
        for store in self.stores:
            dues += [_first_due(store, prefix, self.now) for prefix in DUE_INDEXES]
        later = [d for d in dues if d is not None and d > self.now]
        return min(later, default=None)

    def _free_slots(self, lane: Lane) -> int:
        return self.settings.lane_slots.get(lane, 0) - self.runner.running(lane)


def _first_due(store: MemoryStore, prefix: bytes, now: int) -> int | None:
    """The first due time after ``now`` in one of a store's due indexes."""
    key = next(store.keys(prefix, prefix + k.num(now + 1)), None)
    return None if key is None else int(key[len(prefix):len(prefix) + 20])
