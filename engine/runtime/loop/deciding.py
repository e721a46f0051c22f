"""The decide step: per partition that may decide, results → progress → commands → due timers → free slots.

Each partition that may decide hands its draft (``loop/draft.py``) to the steps in turn, with
what waits in its inbound queues: its finished attempts to ``outcomes.record``, its command
records to ``Admission.admit``, then its timers fire and dispatch deals the free slots over the
drafts. A step stages what it decides into the draft, which folds each event at once, so the
next decision of the tick sees it; the steps return what they staged (events, how many started).
The decide step returns what the loop must carry out around it (:class:`Decided`): how many
command records it decided (the inbox counts them), what the time router did (for the gauges
and the log), and when a rate-limited job's next token is due (the loop wakes then); a draft
whose store failed a read says so (``Draft.corrupt``). Commands are decided a few
per partition in turn for at most ``ADMIT_BUDGET_S``: the rest wait for the next tick, so
a backlog of commands never holds up recording results and starting jobs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from engine.domain.decide import DecideContext
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.runtime.execution.verdicts import RunRequest
from engine.runtime.loop import outcomes
from engine.runtime.loop.admit import Admission
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.dispatch import Dispatcher, rotate, slots_spoken_for
from engine.runtime.loop.draft import Draft
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.timers import PartitionTimers
from engine.runtime.loop.written import Written

ADMIT_BUDGET_S = 0.02
"""The longest a tick spends deciding commands; the rest wait for the next tick, so a backlog of
commands never holds up recording results and starting jobs for more than this."""
COMMANDS_IN_TURN = 32
"""Commands one partition decides before the next partition's turn."""


@dataclass(slots=True)
class Decided:
    """What one decide step did that the loop carries on with."""

    commands: int = 0  # command records decided
    overdue: dict[int, int] = field(default_factory=dict)  # partition -> jobs the overdue sweep fired
    promoted: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> timers held after promotion
    wake_at: int | None = None  # a rate-limited job waits for its bucket's next token until then (µs)
    started: int = 0  # attempts started (each JobStarted staged), in process and for remote pools


@dataclass(slots=True)
class Decider:
    """The decide step's collaborators: admission, dispatch, breakers, poison, and the executor's free slots."""

    admission: Admission
    dispatcher: Dispatcher
    board: BreakerBoard
    poison: PoisonDesk
    free_slots: Callable[[Lane], int]
    base_ctx: DecideContext
    turn: int = 0
    """Which partition the next deal begins with; it moves each time a deal starts something, so how many ticks
    ran between two deals (an I/O matter: commits, wake-ups) never changes who is served first."""
    pools_free: Callable[[], dict[str, int]] = dict
    admit_budget_s: float | None = ADMIT_BUDGET_S
    """The longest a tick spends deciding commands (None: all of them; a virtual clock does not move meanwhile)."""
    """Per remote pool, how many more attempts its workers take from this engine now (engine.runtime.remote)."""

    def decide(self, partitions: Mapping[int, Partition], timers: Mapping[int, PartitionTimers],
               progress: list[tuple[RunRequest, float | None, str]], writing: Iterable[Written], now: int,
               taking: bool) -> Decided:
        """Decide for every partition that may, each into its draft; ``taking=False`` (draining) records
        results only."""
        decided = Decided()
        deciding = [p for p in partitions.values() if p.can_decide]
        drafts = {p.number: p.draft for p in deciding}
        ctxs = {n: d.context(self.base_ctx, now) for n, d in drafts.items()}
        for partition in deciding:
            if partition.inbound.results:
                draft, results = partition.draft, partition.inbound.take_results()
                draft.staged.results += results  # recorded again if what they decide is never written
                outcomes.record(draft, results, self.board, self.poison, ctxs[partition.number])
        outcomes.record_progress(drafts, progress, ctxs)
        if not taking:
            return decided
        active = [p for p in deciding if p.state is State.ACTIVE]
        decided.commands = self._commands(active, timers, ctxs)
        for partition in active:
            self._fire_timers(partition.number, timers[partition.number], ctxs[partition.number], decided)
        decided.started = self._dispatch(partitions, [p.draft for p in active], writing, ctxs)
        decided.wake_at = self.dispatcher.wake.take()
        return decided

    def _commands(self, active: list[Partition], timers: Mapping[int, PartitionTimers],
                  ctxs: dict[int, DecideContext]) -> int:
        """Decide waiting commands, a few per partition in turn, for at most ADMIT_BUDGET_S; how many."""
        budget_ends = math.inf if self.admit_budget_s is None else time.perf_counter() + self.admit_budget_s
        done, queued = 0, [p for p in active if p.inbound.commands]
        while queued and (budget_ends == math.inf or time.perf_counter() < budget_ends):
            for partition in queued:
                draft, ctx, desk = partition.draft, ctxs[partition.number], timers[partition.number].desk
                commands = partition.inbound.commands
                n = min(len(commands), COMMANDS_IN_TURN)
                for _ in range(n):
                    offset, raw, signature = commands.popleft()
                    self.admission.admit(draft, offset, raw, ctx, signature, desk)
                done += n
            queued = [p for p in queued if p.inbound.commands]
        return done

    @staticmethod
    def _fire_timers(number: int, timers: PartitionTimers, ctx: DecideContext, decided: Decided) -> None:
        promoted, overdue = timers.tick(ctx)
        if overdue:
            decided.overdue[number] = overdue
        if promoted:
            decided.promoted[number] = timers.held()

    def _dispatch(self, partitions: Mapping[int, Partition], active: list[Draft], writing: Iterable[Written],
                  ctxs: dict[int, DecideContext]) -> int:
        """Deal each lane's free slots, then each remote pool's, over the active drafts in turn; how many started."""
        if not active:
            return 0
        held = list(partitions.values())
        started = 0
        taken = slots_spoken_for([p.draft.staged for p in held] + [w.staged for w in writing],
                                 [p.inbound.results for p in held], self.dispatcher.pool_of)
        for lane in RUNNABLE_LANES:
            free = self.free_slots(lane) - taken[lane.value]
            if free > 0:
                started += self.dispatcher.deal(lane.value, free, rotate(active, self.turn), lambda d: ctxs[d.number])
        for pool, free in self.pools_free().items():
            free -= taken[f"pool:{pool}"]
            for lane in RUNNABLE_LANES:  # a pool's slots serve every lane, the most urgent first
                if free <= 0:
                    break
                n = self.dispatcher.deal(lane.value, free, rotate(active, self.turn), lambda d: ctxs[d.number], pool)
                free, started = free - n, started + n
        if started:  # the next deal begins with the next partition: the turn moves with starts, not with ticks
            self.turn += 1
        return started
