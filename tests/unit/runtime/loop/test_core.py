"""The loop's core on fake ports (loop/core.py): route, decide, the lifecycle of a partition, and the tick.

The core does no I/O, so none of this needs a broker or a stand-in for one: the store is a dict
(engine.testing.store), the clock a number, the executor a list, and a transaction "commits" when the
fake log port writes it (or when the test says so, for one under way).
"""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from engine.contract import messages as m
from engine.contract.codec import encode_command
from engine.domain.decide import DecideContext, RequeueReason, TaskPolicy
from engine.domain.lanes import Lane
from engine.domain.lifecycle import JobState
from engine.domain.timerouter import Windows
from engine.errors import ProjectionCorruptedError
from engine.runtime.execution.verdicts import AttemptOutcome, RunRequest, RunResult
from engine.runtime.loop import core
from engine.runtime.loop.apply import Next, Verdict, judge
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.core import Applied, Core, Read, Rules
from engine.runtime.loop.deciding import Decided
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import IllegalTransition, Offsets, Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.route import Routed, route
from engine.runtime.loop.written import Written
from engine.testing.store import MemoryStore
from engine.testing.virtual import MemoryRecord
from projections.views.indexes import running_jobs
from tests.unit.factories import command, submit

NOW = 1_700_000_000_000_000
TASKS = {"email.send": TaskPolicy()}
BASE = DecideContext(0, 0, 512 * 1024, TASKS)


class BrokenStore(MemoryStore):
    """A store whose next commits fail as a corrupt one's do."""

    broken = False

    def commit(self, changes: dict[bytes, bytes | None], offset: int, indexed: bool = True) -> None:
        if self.broken:
            raise ProjectionCorruptedError("partition 0: the store failed its write")
        super().commit(changes, offset, indexed)


class FakePorts:
    """Ports in memory: a log in a list that commits at once (or not: ``hold_commits``), an executor that records
    what it is given, a clock that stands still. ``calls``: which port each step called, in order."""

    def __init__(self) -> None:
        self.now = NOW
        self.calls: list[str] = []
        self.records: list[tuple[int, MemoryRecord]] = []
        self.results: list[RunResult] = []
        self.started: list[RunRequest] = []
        self.applied_: list[Applied] = []
        self.decided_: list[Decided] = []
        self.log: list[m.Event] = []
        self.next_event = 0
        self.hold_commits = False
        self.commands_sent: list[m.Command] = []
        self.the_core: Core | None = None
        self.sent = 0  # the next command's offset
        self.busy = 0  # attempts started whose results have not come back: each holds a slot

    def clock(self) -> int:
        self.calls.append("clock")
        return self.now

    def read(self) -> Read:
        self.calls.append("read")
        records, self.records = self.records, []
        results, self.results = self.results, []
        self.busy -= len(results)
        return Read(records, results)

    def hold(self, read: Read, now: int) -> None:
        self.calls.append("hold")

    def routed(self, routed: Routed) -> None:
        self.calls.append("routed")

    def finished(self, ended: list[Written]) -> None:
        self.calls.append("finished")

    def applied(self, applied: Applied, now: int) -> None:
        self.calls.append("applied")
        self.applied_.append(applied)
        if applied.step.next is Next.ACTIVATE:
            assert self.the_core is not None
            activated = core.activate(applied.written.partition, BOARD, POISON, Windows(), now, BASE)
            self.the_core.timers[applied.written.partition.number] = activated.timers

    def start(self, starts: list[RunRequest]) -> None:
        self.calls.append("start")
        self.started += starts
        self.busy += len(starts)

    def progress(self) -> list[tuple[RunRequest, float | None, str]]:
        self.calls.append("progress")
        return []

    def decided(self, decided: Decided) -> None:
        self.calls.append("decided")
        self.decided_.append(decided)

    def write(self, work: list[tuple[Partition, Staged]]) -> list[Written]:
        self.calls.append("write")
        begun = []
        for partition, staged in work:
            first, n = self.next_event, len(staged.events)
            self.log += staged.events
            self.next_event += n + 1 if n else 0
            self.commands_sent += staged.commands
            w = Written(partition, staged, first=first if n else None, last=first + n - 1 if n else None)
            if self.hold_commits:
                w.future = Future()
            begun.append(w)
        return begun

    def settle(self, taking: bool, now: int) -> None:
        self.calls.append("settle")

    def timed(self, apply_s: float, decide_s: float, write_s: float) -> None:
        self.calls.append("timed")

    def send(self, *commands: m.Command, partition: int = 0) -> None:
        for c in commands:
            self.records.append((0, MemoryRecord(partition, self.sent, encode_command(c))))
            self.sent += 1


BOARD = BreakerBoard({})
POISON = PoisonDesk(lambda job_id: None)


def made_core(slots: int = 4, store: MemoryStore | None = None) -> tuple[Core, FakePorts]:
    """A core with one partition, claimed and active at epoch 1, over ``store``."""
    ports = FakePorts()
    rules = Rules("ns.commands", 1, BASE, "owner-a", {}, lambda t: 1.0, lambda t: None, lambda s: ())
    the_core = Core(core.decider(rules, BOARD, POISON, lambda lane: slots - ports.busy if lane is Lane.NORMAL else 0,
                                 admit_budget_s=None))
    ports.the_core = the_core
    partition = the_core.partitions[0] = Partition(0, "owner-a")
    partition.open(store or MemoryStore(), None)  # type: ignore[arg-type]
    partition.move(State.RESTORING)
    partition.stands(Offsets(next_event=0))
    core.claim(partition, NOW)
    core.tick(the_core, ports)  # the claim is written
    core.tick(the_core, ports)  # ...and applied: active
    assert partition.state is State.ACTIVE
    ports.calls.clear()
    return the_core, ports


def result(request: RunRequest, kind: str = "succeeded") -> RunResult:
    return RunResult(request, AttemptOutcome(kind))  # type: ignore[arg-type]


def types(events: list[m.Event]) -> list[str]:
    return [type(e.body).__name__ for e in events]


# --- the tick ------------------------------------------------------------------------------------


def test_a_tick_calls_its_ports_in_the_steps_order() -> None:
    the_core, ports = made_core()
    ports.send(submit("job-1"))
    core.tick(the_core, ports)
    assert ports.calls == ["read", "clock", "hold", "routed", "start", "progress", "decided", "write", "timed",
                           "settle"]
    core.tick(the_core, ports)  # the transaction written before ended: collected, then applied
    assert ports.calls[10:16] == ["read", "clock", "hold", "routed", "finished", "applied"]


def test_a_transaction_is_applied_at_the_next_tick_and_its_starts_go_to_the_executor_then() -> None:
    the_core, ports = made_core()
    ports.send(submit("job-1"))
    assert core.tick(the_core, ports) == 1  # one transaction begun
    assert types(ports.log[-3:]) == ["JobSubmitted", "JobQueued", "JobStarted"]
    assert ports.started == [] and the_core.partitions[0].writing is not None
    assert core.tick(the_core, ports) == 1  # ...and applied
    assert [(r.job_id, r.attempt) for r in ports.started] == [("job-1", 1)]
    assert the_core.partitions[0].offsets.commands == 1  # the command's offset went with the transaction


def test_a_partition_decides_nothing_while_its_transaction_is_under_way() -> None:
    the_core, ports = made_core()
    ports.hold_commits = True
    ports.send(submit("job-1"))
    core.tick(the_core, ports)
    (under_way,) = the_core.writing
    ports.send(submit("job-2"))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    assert ports.applied_[-1].written is not under_way  # not ended: never applied
    assert [c[0] for c in the_core.partitions[0].inbound.commands] == [1]  # job-2 waits, undecided
    under_way.future.set_result(None)  # type: ignore[union-attr]
    ports.hold_commits = False
    core.tick(the_core, ports)
    assert ports.applied_[-1].written is under_way and not the_core.partitions[0].inbound.commands
    assert "job-2" in {e.job_id for e in ports.log}


def test_a_result_is_recorded_and_the_slot_it_frees_starts_the_next_job() -> None:
    the_core, ports = made_core(slots=1)
    ports.send(submit("job-1"), submit("job-2"))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    (first,) = ports.started
    ports.results.append(result(first))
    core.tick(the_core, ports)
    assert types([e for e in ports.log if e.job_id == "job-1"])[-1] == "JobSucceeded"
    assert [e.job_id for e in ports.log if isinstance(e.body, m.JobStarted)] == ["job-1", "job-2"]
    assert ports.decided_[-1].started == 1


def test_draining_records_results_but_starts_nothing() -> None:
    the_core, ports = made_core(slots=1)
    ports.send(submit("job-1"), submit("job-2"))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    ports.results.append(result(ports.started[0]))
    ports.send(submit("job-3"))
    core.tick(the_core, ports, taking=False)
    assert types([e for e in ports.log if e.job_id == "job-1"])[-1] == "JobSucceeded"
    assert [e.job_id for e in ports.log if isinstance(e.body, m.JobStarted)] == ["job-1"]
    assert "job-3" not in {e.job_id for e in ports.log}


def test_a_store_that_fails_its_commit_still_starts_and_cancels_what_the_committed_events_say() -> None:
    store = BrokenStore()
    the_core, ports = made_core(slots=1, store=store)
    ports.send(submit("job-1"))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    ports.send(command("job-1", m.CancelJob("no longer needed", "ops")), submit("job-2"))
    core.tick(the_core, ports)  # JobCancelRequested for the running attempt is written...
    store.broken = True
    core.tick(the_core, ports)  # ...and committed in the log, but the store fails to commit its batch
    applied = ports.applied_[-1]
    assert applied.corrupt is not None and applied.counted
    assert applied.cancels == [("job-1", 1)]  # the running attempt is told to stop all the same


# --- route ---------------------------------------------------------------------------------------


def partitions(*states: State) -> dict[int, Partition]:
    held = {}
    for n, state in enumerate(states):
        p = Partition(n, "owner-a")
        p.state = state
        held[n] = p
    return held


def record(partition: int, offset: int, tag: int = 0) -> tuple[int, MemoryRecord]:
    return tag, MemoryRecord(partition, offset, encode_command(submit(f"job-{offset}")))


def request(partition: int) -> RunRequest:
    return RunRequest(partition, 1, "job-r", "acme", "email.send", 1, Lane.NORMAL, m.Payload(b"{}"), None, 0.0, 0)


def test_route_queues_an_active_partitions_records_and_rewinds_one_still_restoring_once() -> None:
    held = partitions(State.ACTIVE, State.RESTORING)
    routed = route(held, [record(0, 5), record(1, 7), record(1, 8), record(0, 6)], [])
    assert [c[0] for c in held[0].inbound.commands] == [5, 6]
    assert [(r.partition, r.offset) for r in routed.rewinds] == [(1, 7)]  # the records behind it come again
    assert routed.dropped == 2 and not held[1].inbound.commands


def test_route_drops_records_read_before_a_rewind_and_those_of_partitions_not_held() -> None:
    held = partitions(State.ACTIVE)
    held[0].rewound(3)
    routed = route(held, [record(0, 1, tag=2), record(0, 2, tag=3), record(4, 1, tag=3)], [])
    assert [c[0] for c in held[0].inbound.commands] == [2] and routed.dropped == 2 and not routed.rewinds


def test_route_gives_results_to_partitions_that_decide_or_resume_and_drops_the_rest() -> None:
    held = partitions(State.ACTIVE, State.REVOKING, State.RESTORING, State.RESTORING)
    held[3].resuming = True
    route(held, [], [result(request(n)) for n in (0, 1, 2, 3, 9)])
    assert [len(held[n].inbound.results) for n in range(4)] == [1, 1, 0, 1]


# --- decide --------------------------------------------------------------------------------------


def test_decide_records_results_before_it_decides_commands() -> None:
    the_core, ports = made_core(slots=1)
    ports.send(submit("job-1"))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    partition = the_core.partitions[0]
    partition.inbound.results.append(result(ports.started[0]))  # as route leaves it: its handler returned
    ports.busy -= 1
    partition.inbound.commands.append((1, encode_command(submit("job-2")), None))
    decided = the_core.decide([], NOW, taking=True)
    staged = partition.draft.staged
    assert types(staged.events) == ["JobSucceeded", "JobSubmitted", "JobQueued", "JobStarted"]
    assert decided.commands == 1 and decided.started == 1


def test_decide_without_a_budget_decides_every_command_waiting() -> None:
    the_core, _ = made_core(slots=0)
    partition = the_core.partitions[0]
    for n in range(200):
        partition.inbound.commands.append((n, encode_command(submit(f"job-{n}")), None))
    assert the_core.decide([], NOW, taking=True).commands == 200 and not partition.inbound.commands


def test_a_due_timer_fires_in_the_decide_step_once_its_job_is_staged() -> None:
    the_core, ports = made_core()
    ports.send(submit("job-1", run_at=NOW + 5_000_000))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    assert the_core.timers[0].next_due() == NOW + 5_000_000  # the timers saw the staged JobScheduled
    ports.now = NOW + 5_000_000
    core.tick(the_core, ports)
    assert types([e for e in ports.log if e.job_id == "job-1"]) == ["JobSubmitted", "JobScheduled", "JobQueued",
                                                                   "JobStarted"]


def test_the_dealing_turn_moves_with_starts_not_with_ticks() -> None:
    slots = [0]
    the_core, ports = made_core(slots=0)
    the_core.decider.free_slots = lambda lane: slots[0] if lane is Lane.NORMAL else 0
    ports.send(submit("job-1"))
    for _ in range(3):  # ticks that start nothing (no slot free): who is served first stays as it was
        core.tick(the_core, ports)
    assert the_core.decider.turn == 0
    slots[0] = 1
    core.tick(the_core, ports)
    assert ports.decided_[-1].started == 1 and the_core.decider.turn == 1


# --- the lifecycle -------------------------------------------------------------------------------


def test_a_claim_takes_the_epoch_after_the_newest_and_the_partition_waits_for_it() -> None:
    the_core, ports = made_core()
    assert ports.log[0].body == m.OwnershipClaimed(0, "owner-a") and ports.log[0].epoch == 1
    partition = Partition(1, "owner-a")
    partition.open(the_core.partitions[0].store, None)  # type: ignore[arg-type]  # a store whose newest claim is 1
    partition.move(State.RESTORING)
    core.claim(partition, NOW)
    assert partition.state is State.CLAIMING and partition.epoch == 2 and not partition.can_decide


def test_activation_requeues_what_an_older_epoch_left_running_and_its_own_as_producer_reset() -> None:
    the_core, ports = made_core()
    ports.send(submit("job-1"), submit("job-2"))
    core.tick(the_core, ports)
    core.tick(the_core, ports)
    old = the_core.partitions[0]
    assert sorted(job for job, _ in running_jobs(old.store)) == ["job-1", "job-2"]  # type: ignore[arg-type]
    again = Partition(0, "owner-a")
    again.open(old.store, None)  # type: ignore[arg-type]
    again.move(State.RESTORING)
    core.claim(again, NOW)
    again.draft.take_staged()  # written: its claim stays folded in the draft's overlay
    activated = core.activate(again, BOARD, POISON, Windows(), NOW, BASE, own={1})
    assert again.state is State.ACTIVE and activated.adopted == []
    bodies = [e.body for e in again.draft.staged.events]
    assert bodies == [m.JobRequeued(1, 1, RequeueReason.PRODUCER_RESET.value)] * 2
    assert again.draft.job("job-1").state is JobState.QUEUED  # type: ignore[union-attr]


def test_the_transition_table_refuses_an_edge_it_does_not_have() -> None:
    partition = Partition(0, "owner-a")
    with pytest.raises(IllegalTransition):
        partition.move(State.ACTIVE)  # assigned -> active: never without a restore and a claim
    partition.move(State.RESTORING)
    with pytest.raises(IllegalTransition):
        partition.resync(0.0, resuming=True)  # restoring -> restoring is no edge either


def test_a_partitions_lease_changes_through_its_own_methods() -> None:
    partition = Partition(0, "owner-a")
    partition.move(State.RESTORING)
    partition.move(State.CLAIMING)
    partition.move(State.ACTIVE)
    partition.revoke(12.5, "handover")
    assert (partition.state, partition.revoke_deadline, partition.revoke_reason) == (State.REVOKING, 12.5, "handover")
    assert partition.hand_back() and not partition.hand_back()  # once
    assert (partition.refused(), partition.refused(), partition.accepted(), partition.refusals) == (1, 2, 2, 0)
    partition.closed()
    partition.closed()  # from any state, once
    assert partition.state is State.CLOSED


# --- checkpoints ---------------------------------------------------------------------------------


def test_a_checkpoint_counts_once_its_transaction_has_committed() -> None:
    partition = Partition(0, "owner-a")
    partition.stands(Offsets(next_event=500, checkpoint=-1))
    pending = Written(partition, Staged(), checkpoint=420, future=Future())
    assert partition.offsets.checkpoint == -1  # launched: not yet the newest
    failed = Written(partition, Staged(), error=RuntimeError("aborted"), checkpoint=420)
    assert judge(failed)[1].checkpoint == -1
    pending.future.set_result(None)  # type: ignore[union-attr]
    verdict, offsets = judge(pending)
    assert verdict is Verdict.COMMITTED and offsets.checkpoint == 420 and offsets.since_checkpoint == 79
