"""The loop's steps without a broker: admit, dispatch, record results, apply; poison set aside at each step.

Each test drives one partition with a real RocksDB store through the same step objects the
engine uses; only the Kafka transaction is stood in for by numbering the staged events as
the log would (the write step itself is exercised against a real broker in tests/integration).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.contract import messages as m
from engine.contract.codec import encode_command
from engine.domain.decide import DecideContext, Emit, TaskPolicy
from engine.domain.lanes import Lane
from engine.domain.lifecycle import JobState
from engine.domain.timerouter import Windows
from engine.errors import FencedError, TransactionAbortedError
from engine.runtime.execution.executor import AttemptOutcome, RunRequest, RunResult
from engine.runtime.loop import orphans, outcomes
from engine.runtime.loop import draft as draft_module
from engine.runtime.loop.admit import Admission
from engine.runtime.loop.apply import Verdict, commit, judge
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.dispatch import Dispatcher
from engine.runtime.loop.partition import IllegalTransition, Offsets, Partition, State
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.timers import PartitionTimers
from engine.runtime.loop.write import Written
from projections.evolve import WRITE_MODEL, fold
from projections.batch import Batch
from projections.store import open_store
from projections.views.indexes import running_jobs
from tests.unit.factories import command, submit

TASKS = {"email.send": TaskPolicy()}
NOW = 1_700_000_000_000_000


class Rig:
    """One active partition and the engine's step objects around it."""

    def __init__(self, path: Path):
        self.store = open_store(path)
        self.partition = Partition(0, "owner-a")
        self.partition.open(self.store, None)  # type: ignore[arg-type]
        self.draft = self.partition.draft
        self.poisoned: list[str] = []
        self.poison = PoisonDesk(self.poisoned.append)
        self.board = BreakerBoard({})
        self.draft.claim(1)
        self.draft.stage(Emit(None, None, m.OwnershipClaimed(0, "owner-a")), NOW)
        self.partition.state = State.ACTIVE
        self.timers = PartitionTimers(self.draft, Windows(), self.board, self.poison.job)
        self.admission = Admission("ns.commands", 1, TASKS, {}, lambda t: None, lambda s: (), self.poison)
        self.dispatcher = Dispatcher(self.board, lambda t: 1.0, "owner-a", self.poison.job)
        self.log: list[tuple[int, m.Event]] = []  # what the log holds, at its offsets
        self.partition.offsets = Offsets(next_event=0)
        self.command_offset = 0

    def ctx(self) -> DecideContext:
        return self.draft.context(DecideContext(0, 0, 512 * 1024, TASKS), NOW)

    def admit(self, command: m.Command | bytes) -> None:
        raw = command if isinstance(command, bytes) else encode_command(command)
        self.admission.admit(self.draft, self.command_offset, raw, self.ctx(), desk=self.timers.desk)
        self.command_offset += 1

    def dispatch(self, free: int = 10) -> int:
        return self.dispatcher.deal(Lane.NORMAL.value, free, [self.draft], lambda d: self.ctx())

    def finish(self, kind: str = "succeeded") -> None:
        starts = self.draft.staged.starts
        results = [RunResult(RunRequest(0, 1, job.job_id, job.tenant_id, job.task_type, event.body.attempt,  # type: ignore[union-attr]
                                        Lane.NORMAL, job.payload, None, 0.0, 0), AttemptOutcome(kind))  # type: ignore[arg-type]
                   for event, job in starts]
        self.apply()
        outcomes.record(self.draft, results, self.board, self.poison, self.ctx())

    def apply(self) -> Verdict:
        """The write step's stand-in: number the staged events as the log would, then apply."""
        staged = self.draft.take_staged()
        n, first = len(staged.events), self.partition.offsets.next_event
        self.log += list(zip(range(first, first + n), staged.events))
        return self.applied(Written(self.partition, staged, None, first if n else None, first + n - 1 if n else None))

    def applied(self, written: Written) -> Verdict:
        """What the engine's apply step does with an ended transaction: judge it, keep the offsets, commit."""
        verdict, self.partition.offsets = judge(written)
        if verdict is Verdict.COMMITTED:
            commit(written)
        return verdict

    def job_state(self, job_id: str) -> JobState | None:
        job = self.draft.job(job_id)
        return job.state if job else None


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "p0000")
    yield r
    r.store.close()


def types(events: list[m.Event], job_id: str) -> list[str]:
    return [e.type for e in events if e.job_id == job_id]


def logged(rig: Rig) -> list[m.Event]:
    return [event for _, event in rig.log]


def test_the_transition_table_refuses_what_it_lacks() -> None:
    partition = Partition(3, "owner-a")
    with pytest.raises(IllegalTransition):
        partition.move(State.ACTIVE)  # assigned → active skips restoring and claiming
    for state in (State.RESTORING, State.CLAIMING, State.ACTIVE, State.RESTORING, State.ACTIVE, State.REVOKING,
                  State.CLOSED):
        partition.move(state)
    with pytest.raises(IllegalTransition):
        partition.move(State.ACTIVE)  # closed is final


def test_the_offsets_are_replaced_whole_and_a_restore_never_stops_short_of_our_own_writes() -> None:
    offsets = Offsets(next_event=5, written_end=20)
    assert offsets.restoring(12).restore_target == 20  # the stable end lies before our own committed events
    assert offsets.restoring(30).restore_target == 30
    restored = offsets.restoring(30).restored()
    assert restored.next_event == 30 and offsets.next_event == 5  # a new value; the old one is unchanged
    assert restored.since_checkpoint == 30  # no checkpoint known: everything before offset 30 was folded
    assert restored.checkpointed(24).since_checkpoint == 5 and restored.checkpointed(-1) == restored


def test_a_job_is_admitted_started_and_finished_and_the_store_equals_a_rebuild(rig: Rig, tmp_path: Path) -> None:
    rig.admit(submit("job-1"))
    assert rig.dispatch() == 1  # queued in this tick, started in this tick
    assert types(rig.draft.staged.events, "job-1") == ["JobSubmitted", "JobQueued", "JobStarted"]
    rig.finish()
    assert rig.apply() is Verdict.COMMITTED
    assert types(logged(rig), "job-1") == ["JobSubmitted", "JobQueued", "JobStarted", "JobSucceeded"]
    assert rig.job_state("job-1") is JobState.COMPLETED
    rebuilt = open_store(tmp_path / "rebuilt")
    batch = Batch(rebuilt, profile=WRITE_MODEL)  # an owner's store holds its write model
    for offset, event in rig.log:
        fold(batch, event, offset)
    batch.commit()
    assert list(rebuilt.items()) == list(rig.store.items())  # the write model, byte for byte
    rebuilt.close()


def test_free_slots_bound_the_starts_and_the_rest_stay_queued(rig: Rig) -> None:
    for n in range(5):
        rig.admit(submit(f"job-{n}"))
    assert rig.dispatch(free=2) == 2
    assert sum(1 for n in range(5) if rig.job_state(f"job-{n}") is JobState.RUNNING) == 2
    assert sum(1 for n in range(5) if rig.job_state(f"job-{n}") is JobState.QUEUED) == 3


def test_a_command_whose_decision_raises_is_rejected_and_nothing_it_folded_stays(rig: Rig, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = draft_module.decide

    def decide(job, given, ctx):  # type: ignore[no-untyped-def]
        if getattr(getattr(given, "command", None), "job_id", "") == "poison":
            real(job, given, ctx)
            raise RuntimeError("boom in decide")
        return real(job, given, ctx)

    monkeypatch.setattr(draft_module, "decide", decide)
    rig.admit(submit("before"))
    rig.admit(submit("poison"))
    rig.admit(submit("after"))
    events = rig.draft.staged.events
    assert types(events, "poison") == ["JobRejected"]
    rejected = [e.body for e in events if e.job_id == "poison"][0]
    assert rejected.reason == "engine_error" and "boom in decide" in rejected.detail  # type: ignore[union-attr]
    assert rig.job_state("poison") is None and rig.job_state("after") is JobState.QUEUED
    assert rig.poisoned == ["decide"]
    assert rig.draft.staged.next_command_offset == 3  # its offset is consumed with the others


def test_an_undecodable_command_is_quarantined(rig: Rig) -> None:
    rig.admit(b"\xc3\x01garbage")
    assert [e.type for e in rig.draft.staged.events][-1] == "CommandQuarantined"


def test_a_queued_job_no_head_can_be_made_of_is_dead_lettered_and_dispatch_goes_on(rig: Rig) -> None:
    rig.admit(submit("good"))
    old = m.JobSubmitted("email.send", m.Payload(b"{}"), 5, "NORMAL", 3, run_at=-1_000_000)  # as an old log may hold
    rig.draft.stage(Emit("bad", "acme", old), NOW)
    rig.draft.stage(Emit("bad", "acme", m.JobQueued("submitted")), NOW)  # queued with a negative due time
    assert rig.dispatch() == 1
    assert rig.job_state("good") is JobState.RUNNING and rig.job_state("bad") is JobState.DEAD
    dead = [e.body for e in rig.draft.staged.events if e.job_id == "bad"][-1]
    assert isinstance(dead, m.JobDeadLettered) and dead.reason == "engine_error"
    assert rig.poisoned == ["dispatch"]


def test_a_result_whose_decision_raises_dead_letters_the_running_job(rig: Rig, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rig.admit(submit("job-1"))
    rig.dispatch()
    monkeypatch.setattr(outcomes, "_record_one", lambda *a: (_ for _ in ()).throw(ValueError("bad result")))
    rig.finish()
    assert types(rig.draft.staged.events, "job-1") == ["JobFailed", "JobDeadLettered"]
    assert rig.job_state("job-1") is JobState.DEAD and rig.poisoned == ["result"]


def test_a_result_of_an_older_epoch_is_dropped(rig: Rig) -> None:
    rig.admit(submit("job-1"))
    rig.dispatch()
    rig.draft.claim(2)  # the partition was taken over and claimed again meanwhile
    rig.finish()
    assert rig.draft.staged.events == [] and rig.job_state("job-1") is JobState.RUNNING


def test_jobs_left_running_by_an_older_epoch_are_requeued_under_the_new_one(rig: Rig) -> None:
    for n in range(2):
        rig.admit(submit(f"job-{n}"))
    rig.dispatch()
    rig.apply()
    assert orphans.orphaned(running_jobs(rig.store), 1) == []  # started under the epoch that holds it
    rig.draft.claim(2)  # taken over and claimed again
    rig.draft.stage(Emit(None, None, m.OwnershipClaimed(0, "owner-a")), NOW)
    rig.apply()
    orphaned = orphans.orphaned(running_jobs(rig.store), rig.draft.epoch)
    assert sorted(orphaned) == ["job-0", "job-1"]
    orphans.requeue(rig.draft, orphaned, rig.poison, NOW)
    staged = rig.draft.staged.events
    assert [e.type for e in staged] == ["JobRequeued", "JobRequeued"] and staged == rig.draft.staged.events
    assert [rig.job_state(j) for j in orphaned] == [JobState.QUEUED, JobState.QUEUED] and rig.poisoned == []


def test_apply_folds_positions_only_for_a_transaction_that_committed_with_our_events_in_a_row(rig: Rig) -> None:
    rig.admit(submit("job-1"))
    staged = rig.draft.take_staged()
    rig.partition.offsets = Offsets(next_event=10)
    assert rig.applied(Written(rig.partition, staged, FencedError("x"))) is Verdict.FENCED
    assert rig.applied(Written(rig.partition, staged, TransactionAbortedError("x"))) is Verdict.ABORTED
    n = len(staged.events)
    one_foreign_record = Written(rig.partition, staged, None, 11, 11 + n - 1)
    assert rig.applied(one_foreign_record) is Verdict.OUT_OF_ORDER
    assert rig.applied(Written(rig.partition, staged, None, 10, 10 + n)) is Verdict.OUT_OF_ORDER  # a gap inside
    assert rig.applied(Written(rig.partition, staged, None, 10, 10 + n - 1)) is Verdict.COMMITTED
    assert rig.store.applied_offset() == 10 + n - 1 and rig.partition.offsets.next_event == 10 + n + 1


def test_a_transaction_out_of_order_still_moves_the_end_a_catch_up_must_reach(rig: Rig) -> None:
    """issue 22: a catch-up to the stable end stopped before the owner's own committed starts (a foreign
    transaction open before them), and their results were dropped against a store that saw them queued."""
    rig.admit(submit("job-1"))
    staged = rig.draft.take_staged()
    rig.partition.offsets, n = Offsets(next_event=10), len(staged.events)
    assert rig.partition.offsets.written_end == 0
    assert rig.applied(Written(rig.partition, staged, TransactionAbortedError("x"))) is Verdict.ABORTED
    assert rig.partition.offsets.written_end == 0  # nothing of it is in the log
    assert rig.applied(Written(rig.partition, staged, None, 12, 12 + n - 1)) is Verdict.OUT_OF_ORDER
    assert rig.partition.offsets.written_end == 12 + n + 1  # past its last event and its commit marker
    assert rig.applied(Written(rig.partition, staged, None)) is Verdict.OUT_OF_ORDER  # no delivery report
    assert rig.partition.offsets.written_end == 12 + n + 1  # never moves back; without reports: 10 + n + 1 at least


def test_results_whose_decisions_are_never_written_are_taken_back_in_order(rig: Rig) -> None:
    """issue 22: a result decided into a transaction that aborted was lost with it (its job stayed running)."""
    staged, inbound = rig.draft.staged, rig.partition.inbound
    staged.results += ["first", "second"]
    inbound.results.append("arrived meanwhile")
    inbound.keep_results(staged.take_results())
    assert inbound.results == ["first", "second", "arrived meanwhile"] and staged.results == []
    rig.draft.forget()
    assert inbound.results == ["first", "second", "arrived meanwhile"]  # a resync keeps them


def test_a_huge_undecodable_command_is_quarantined_with_its_head_kept(rig: Rig) -> None:
    rig.admit(b"\xc3\x01" + b"x" * 300_000)  # what a broker's default 1 MB limit lets through, and more
    body = rig.draft.staged.events[-1].body
    assert isinstance(body, m.CommandQuarantined)
    assert len(body.raw) == 64 * 1024 and "300002 bytes" in body.error
    assert len(rig.draft.staged.raws[-1]) < 100_000  # the event fits any broker's record limit


def test_a_job_set_aside_as_poison_still_tells_the_jobs_waiting_for_it(rig: Rig, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rig.admit(submit("job-1"))
    rig.admit(command("job-1", m.AwaitJob("job-2")))
    assert rig.draft.job("job-1").dependents == ("job-2",)  # type: ignore[union-attr]
    rig.dispatch()
    monkeypatch.setattr(outcomes, "_record_one", lambda *a: (_ for _ in ()).throw(ValueError("bad result")))
    rig.finish()
    assert rig.job_state("job-1") is JobState.DEAD
    (report,) = [c for c in rig.draft.staged.commands if c.job_id == "job-2"]
    assert report.body == m.ReportDependency("job-1", "dead", None, "EngineError: ValueError: bad result")


def test_admission_tells_decide_whether_a_dependency_was_reported_already(rig: Rig) -> None:
    waits = m.SubmitJob("email.send", m.Payload(b"{}"), depends_on={"a": "cancel", "b": "cancel"})
    rig.admit(command("job-1", waits))
    report = command("job-1", m.ReportDependency("a", "completed", b"1"))
    rig.admit(report)
    rig.admit(report)  # the same report again, in the same tick and after it
    rig.apply()
    rig.admit(report)
    assert types(logged(rig) + rig.draft.staged.events, "job-1").count("DependencyReported") == 1
    assert rig.job_state("job-1") is JobState.WAITING


def test_the_draft_stamps_its_events_with_the_claimed_epoch_and_ids_never_repeat_within_it(rig: Rig) -> None:
    rig.admit(submit("job-1"))
    before = [e.event_id for e in rig.draft.staged.events]
    assert before[0] == "0-1-1" and rig.partition.epoch == 1  # the claim staged first, under epoch 1
    rig.draft.forget()  # a resync drops what was staged; the ids of the epoch go on
    rig.admit(submit("job-2"))
    assert rig.draft.staged.events[0].event_id == f"0-1-{len(before) + 1}"
    rig.draft.claim(2)  # a new claim: its events start again under the new epoch
    rig.admit(submit("job-3"))
    assert rig.draft.staged.events[-2].event_id == "0-2-1" and rig.partition.epoch == 2
