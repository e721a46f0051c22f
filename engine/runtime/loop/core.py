"""The loop's core, without I/O: the source of truth for the order of a tick's steps and for what each one does.

One :func:`tick` drives the steps in order over a :class:`Core` (the partitions held, their timers, the
transactions under way, the decide step's collaborators) and a :class:`Ports` value: everything a tick
reads from or hands to the world. The engine (``loop/engine.py``: Kafka, RocksDB, the executor, the
wall clock), the in-memory ``TestEngine`` and ``epochq simulate`` (``engine.testing``: a list for a log, a
dict for a store, a virtual clock, an inline or recorded runner) drive the same tick; only their
ports differ. Each step takes data and returns data (the sans-I/O shape of h11, or of Kafka Streams'
task)::

    read    ports.read → Read: command records, finished attempts (and rebalance notes, for the ports' hold)
    hold    ports.hold: partitions set up, restored, claimed (the engine's lifecycle; nothing in memory)
    route   route(partitions, records, results) → Routed: queued per partition; what was not placed
    apply   Core.apply → one Applied per ended transaction: its verdict, the attempts to start, the cancels
    start   ports.start(the attempts whose JobStarted committed)
    decide  Core.decide → Decided: results, progress, commands, due timers, free slots, staged in the drafts
    write   Core.writes → (partition, staged) per partition with work; ports.write → the transactions begun
    settle  ports.settle: revoking partitions closed, housekeeping

A transaction written in one tick is applied in a later one: its commit may run meanwhile (the
engine's commit threads) or be done already (a list in memory).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.decide import DecideContext, Emit, RequeueReason
from engine.domain.jobs import JobView
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.contract.signing import Proof
from engine.domain.timerouter import Windows
from engine.errors import ProjectionCorruptedError
from engine.runtime.execution.verdicts import RunRequest, RunResult
from engine.runtime.loop import orphans
from engine.runtime.loop.apply import NextStep, Verdict, commit, next_step, judge, run_requests
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.admit import Admission
from engine.runtime.loop.deciding import ADMIT_BUDGET_S, Decided, Decider
from engine.runtime.loop.dispatch import Dispatcher
from engine.runtime.loop.draft import Staged, cancel_requests
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.route import CommandRecord, Routed, route
from engine.runtime.loop.timers import PartitionTimers
from projections.views.breakers import all_breakers
from projections.views.counters import fair_state
from projections.views.indexes import running_jobs

if TYPE_CHECKING:  # types only: the core runs no transaction (engine.testing drives it in memory)
    from engine.runtime.loop.written import Written

WRITING = (State.ACTIVE, State.REVOKING, State.CLAIMING)
"""The states in which a partition's staged work is written."""
Progress = list[tuple[RunRequest, "float | None", str]]


@dataclass(slots=True)
class Read:
    """What the read step brought: command records (with the reader's seek tag), finished attempts, and what
    only the ports' hold step acts on (the engine's rebalance notes)."""

    commands: Iterable[tuple[int, CommandRecord]] = ()
    results: list[RunResult] = field(default_factory=list)
    notes: list[Any] = field(default_factory=list)


@dataclass(slots=True)
class Applied:
    """One ended transaction as the apply step judged it: what comes next for its partition, what to start
    and stop. ``corrupt``: it committed in the log, but the store failed to commit its batch (wipe, restore)."""

    written: Written
    step: NextStep
    starts: list[RunRequest] = field(default_factory=list)
    cancels: list[tuple[str, int]] = field(default_factory=list)
    corrupt: ProjectionCorruptedError | None = None

    @property
    def counted(self) -> bool:
        """Whether its events are in the log: what they say is started, stopped and counted."""
        return self.step.counted


@dataclass(slots=True)
class Activated:
    """What a partition's activation left for its holder: its timers, and the remote attempts it adopted."""

    timers: PartitionTimers
    adopted: list[JobView]


@dataclass(frozen=True, slots=True)
class Rules:
    """What the decide step's collaborators are made of: the topics' layout, the task policies, the options' limits,
    and the tenants table's answers (functions: an engine's read its live table, a test's a dict)."""

    topic: str  # the commands topic (a poison record's coordinates)
    partitions: int
    base: DecideContext  # the task policies, the largest payload
    owner_id: str
    lane_limits: dict[Lane, int]
    weight: Callable[[str], float]
    max_queued: Callable[[str], int | None]
    scope: Callable[[str | None], tuple[str, ...]]
    fair: bool = True
    authenticate: Callable[[m.Command, bytes, bytes | None, str | None], Proof] | None = None
    namespace: str | None = None
    pool_of: Callable[[str], str | None] | None = None  # remote pools (None: every type runs in process)
    catalog_pool: Callable[[str], str | None] = lambda task_type: None
    """The pool the catalog sends a task type to, whether or not this engine dispatches to pools: a worker's result
    for a start written before v7 (which did not record its pool) is judged by it."""


def decider(rules: Rules, board: BreakerBoard, poison: PoisonDesk, free_slots: Callable[[Lane], int],
            pools_free: Callable[[], dict[str, int]] = dict,
            admit_budget_s: float | None = ADMIT_BUDGET_S) -> Decider:
    """The decide step as ``rules`` make it: admission, fair dispatch, breakers, poison; the engine's and
    ``engine.testing``'s alike (``admit_budget_s=None``: every command waiting is decided in one tick)."""
    admission = Admission(rules.topic, rules.partitions, rules.base.tasks, rules.lane_limits,  # type: ignore[arg-type]
                          rules.max_queued, rules.scope, poison, rules.authenticate, namespace=rules.namespace,
                          pool_of=rules.catalog_pool)
    dispatcher = (Dispatcher(board, rules.weight, rules.owner_id, poison.job, rules.fair, pool_of=rules.pool_of)
                  if rules.pool_of is not None
                  else Dispatcher(board, rules.weight, rules.owner_id, poison.job, rules.fair))
    return Decider(admission, dispatcher, board, poison, free_slots, rules.base, pools_free=pools_free,
                   admit_budget_s=admit_budget_s)


class Ports(Protocol):
    """Everything a tick reads from or hands to the world: the log, the store's keeper, the clock, the executor."""

    def clock(self) -> int:
        """The clock (µs since 1970, UTC): the tick's ``now``."""

    def read(self) -> Read:
        """What arrived since the last tick (the engine waits for it up to the next due time)."""

    def hold(self, read: Read, now: int) -> None:
        """Act on what changed in the partitions held (rebalance notes; restores; claims)."""

    def routed(self, routed: Routed) -> None:
        """Carry out what the route step could not place (records dropped, rewinds)."""

    def finished(self, ended: list[Written]) -> None:
        """Collect the ended transactions' outcomes (delivery reports) before they are applied."""

    def applied(self, applied: Applied, now: int) -> None:
        """Carry out one transaction's verdict (metrics, cancels, the partition's next state)."""

    def start(self, starts: list[RunRequest]) -> None:
        """Hand the attempts whose JobStarted committed to the executor."""

    def progress(self) -> Progress:
        """The running attempts' latest progress reports."""

    def decided(self, decided: Decided) -> None:
        """Carry out what the decide step returned (commands counted, timers' gauges, a token's wake-up)."""

    def write(self, work: list[tuple[Partition, Staged]]) -> list[Written]:
        """Begin one transaction per partition's staged work (and any other due: checkpoints); those begun."""

    def settle(self, taking: bool, now: int) -> None:
        """Close what is done being handed back; housekeeping."""

    def timed(self, apply_s: float, decide_s: float, write_s: float) -> None:
        """How long the tick's apply, decide and write steps took (CPU on the loop's thread)."""


class Core:
    """The partitions held, their timers, the transactions under way, and the decide step's collaborators."""

    def __init__(self, decider: Decider, partitions: dict[int, Partition] | None = None,
                 timers: dict[int, PartitionTimers] | None = None,
                 timeout_of: Callable[[str], float] = lambda task_type: 60.0):
        self.decider = decider
        self.partitions: dict[int, Partition] = {} if partitions is None else partitions
        self.timers: dict[int, PartitionTimers] = {} if timers is None else timers
        self.writing: list[Written] = []  # transactions under way, in the order they began
        self.timeout_of = timeout_of  # how long an attempt of a task type may run (s)

    # --- apply ---------------------------------------------------------------------------------

    def ended(self) -> list[Written]:
        """The transactions under way that have ended (committed or failed)."""
        return [w for w in self.writing if w.done]

    def apply(self, ended: list[Written], now: int) -> list[Applied]:
        """Apply each ended transaction: commit its batch if it counts; its verdict, starts and cancels. A
        transaction of a partition dropped meanwhile is forgotten."""
        out: list[Applied] = []
        for w in ended:
            self.writing.remove(w)
            w.partition.ended()
            if self.partitions.get(w.partition.number) is not w.partition:
                continue  # dropped meanwhile (lost or fenced): nothing of it may be applied
            out.append(self._apply_one(w, now))
        return out

    def _apply_one(self, w: Written, now: int) -> Applied:
        verdict, offsets = judge(w)
        w.partition.stands(offsets)
        step = next_step(w, verdict, w.partition.state)
        corrupt = None
        try:
            if verdict is Verdict.COMMITTED:
                commit(w)
        except ProjectionCorruptedError as e:
            corrupt = e  # the events are in the log all the same: what they start and stop goes ahead
        applied = Applied(w, step, corrupt=corrupt)
        if step.counted:
            applied.starts = run_requests(w, self.timeout_of, now / 1e6)
            applied.cancels = cancel_requests(w.staged)
        return applied

    # --- decide and write ----------------------------------------------------------------------

    def decide(self, progress: Progress, now: int, taking: bool) -> Decided:
        """Decide for every partition that may, each into its draft (``taking=False``: results only)."""
        return self.decider.decide(self.partitions, self.timers, progress, self.writing, now, taking)

    def writes(self) -> list[tuple[Partition, Staged]]:
        """Each partition's staged work to write, taken from its draft (its timers have seen all of it first):
        those with work, no transaction under way, and a state that writes."""
        work = []
        for partition in self.partitions.values():
            timers = self.timers.get(partition.number)
            if timers is not None:
                timers.catch_up()  # a final event's schedule report goes out in the same transaction
            if partition.draft.staged and partition.writing is None and partition.state in WRITING:
                work.append((partition, partition.draft.take_staged()))
        return work

    def began(self, written: list[Written]) -> None:
        """Transactions begun by the write port: under way until they end."""
        for w in written:
            w.partition.began(w)
        self.writing += written


def tick(core: Core, ports: Ports, taking: bool = True) -> int:
    """One round of the loop, its steps in the module docstring's order; how many transactions it applied and
    began (0: nothing happened). ``taking=False`` (draining) records results but starts nothing new."""
    read = ports.read()  # read
    now = ports.clock()
    ports.hold(read, now)  # hold
    ports.routed(route(core.partitions, read.commands, read.results))  # route
    t0 = time.perf_counter()
    ended = core.ended()
    if ended:
        ports.finished(ended)
    starts: list[RunRequest] = []
    for applied in core.apply(ended, now):  # apply
        ports.applied(applied, now)
        starts += applied.starts
    ports.start(starts)  # start
    t1 = time.perf_counter()
    ports.decided(core.decide(ports.progress(), now, taking))  # decide
    t2 = time.perf_counter()
    begun = ports.write(core.writes())  # write
    core.began(begun)
    ports.timed(t1 - t0, t2 - t1, time.perf_counter() - t2)
    ports.settle(taking, now)  # settle
    return len(ended) + len(begun)


def claim(partition: Partition, now: int) -> None:
    """``partition`` is caught up with its log: stage ``OwnershipClaimed`` at the epoch after the newest in it, and
    decide nothing more until that claim has committed (CLAIMING; :func:`activate` follows)."""
    draft = partition.draft
    draft.claim(draft.last_epoch() + 1)
    draft.stage(Emit(None, None, m.OwnershipClaimed(partition.number, partition.owner_id)), now)
    partition.move(State.CLAIMING)


def activate(partition: Partition, board: BreakerBoard, poison: PoisonDesk, windows: Windows, now: int,
             base: DecideContext = orphans.NO_POLICIES, own: frozenset[int] | set[int] = frozenset(),
             pool_of: Callable[[JobView], str | None] = lambda job: None) -> Activated:
    """``partition``'s claim committed (or a resync caught up): it decides from now on. Its fair-queuing clocks and
    breakers are loaded from its store, its timers armed; the jobs an older epoch left running are re-queued
    into its draft (``loop/orphans.py``: those of ``own``, epochs this process held, as ``producer_reset``), but
    for those out with a remote pool's workers, which it adopts (returned, for the holder to lease)."""
    partition.move(State.ACTIVE)
    store, draft = partition.store, partition.draft
    draft.fair = {lane.value: fair_state(store, lane.value) for lane in RUNNABLE_LANES}
    for record in all_breakers(store):
        board.resume(record)
    timers = PartitionTimers(draft, windows, board, poison.job)
    timers.desk.load(now)
    left = [(job_id, epoch) for job_id, epoch in running_jobs(store) if fence.older(epoch, draft.epoch)]
    running, adopted = orphans.adopt(left, draft.job, pool_of)
    theirs, mine = orphans.ours(running, set(own))
    orphans.requeue(draft, orphans.orphaned(theirs, draft.epoch), poison, now, base)
    orphans.requeue(draft, orphans.orphaned(mine, draft.epoch), poison, now, base,
                    RequeueReason.PRODUCER_RESET)  # this process's own attempts: its producer was replaced
    return Activated(timers, adopted)
