"""Planned hand-overs of long jobs (a rebalance, a SIGTERM) and a lost owner, with real engine processes.

A job that outlives the grace period is re-queued by its owner before the partition moves, saying why
(``JobRequeued.reason``), and the re-queued attempt counts toward no ``max_attempts``: a hand-over never brings a
job closer to its dead letter, and no view shows more attempts than the job may have.
"""

from __future__ import annotations

import signal
from pathlib import Path

from engine.client import Client, Outcome
from engine.config import Settings
from engine.contract.ids import job_id_for_key
from engine.contract.partitioner import partition_for
from engine.questions.history import job_events
from engine.questions.stores import find_job
from tests.integration.conftest import EngineProcess, eventually, start_engine

APP = "tests.integration.handover_app:app"


def keys_in(partitions: set[int], tenant: str, prefix: str, per_partition: int = 1) -> dict[int, list[str]]:
    """Idempotency keys whose jobs land in each of ``partitions`` (of 3), ``per_partition`` each."""
    found: dict[int, list[str]] = {p: [] for p in partitions}
    n = 0
    while any(len(keys) < per_partition for keys in found.values()):
        key = f"{prefix}-{n}"
        keys = found.get(partition_for(job_id_for_key(tenant, key), 3))
        if keys is not None and len(keys) < per_partition:
            keys.append(key)
        n += 1
    return found


def requeues(settings: Settings, job_id: str) -> list[tuple[str, str, bool]]:
    """(owner, reason, whether the owner re-queued an attempt of its own epoch) of each JobRequeued of the job."""
    return [(e.event.owner, e.event.body.reason, e.event.body.previous_epoch == e.event.epoch)  # type: ignore[union-attr]
            for e in job_events(settings, job_id) if e.event.type == "JobRequeued" and not e.fenced]


def starters(settings: Settings, job_id: str) -> list[str]:
    """The owner that started each attempt of the job, in order."""
    return [e.event.owner for e in job_events(settings, job_id) if e.event.type == "JobStarted" and not e.fenced]


def running_on(client: Client, settings: Settings, job_id: str, owner: str, attempts: int) -> bool:
    return client.status(job_id).status == "running" and starters(settings, job_id)[-1:] == [owner] and \
        len(starters(settings, job_id)) == attempts


def counted_within_max(engine: EngineProcess, settings: Settings, job_id: str, outcome: Outcome) -> bool:
    """Whether the job's record in ``engine``'s store is final with no more counted attempts than it may have, as
    its outcome says."""
    found = find_job(engine.settings(settings), job_id)
    if found is None or found[1].state.value not in ("completed", "dead"):
        return False
    job = found[1]
    assert job.counted_attempts() == outcome.attempts <= job.max_attempts, (job, outcome.attempts)
    return True


def test_a_rebalance_hands_long_jobs_over_with_their_reason_and_counts_no_attempt(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path, app=APP, extra=("--grace", "1"))
    a.wait_active(3)
    gate = tmp_path / "open"
    handles = {p: client.submit("long", {"open_when": str(gate), "fail_once": True}, tenant="acme",
                                idempotency_key=keys[0], max_attempts=2)
               for p, keys in keys_in({0, 1, 2}, "acme", "rebalance").items()}
    for handle in handles.values():
        eventually(lambda h=handle: running_on(client, settings, h.job_id, "a", 1), 60, "the jobs to run on a")

    b = start_engine(engines, settings, "b", tmp_path, app=APP, extra=("--grace", "1"))
    moved = eventually(lambda: b.owned(), 90, "b to take a partition over")
    for p in moved:  # a re-queued it at the end of its grace, saying why; b runs it at once
        job_id = handles[p].job_id
        assert eventually(lambda j=job_id: requeues(settings, j), 30, "the hand-over") == [("a", "handover", True)]
        eventually(lambda j=job_id: running_on(client, settings, j, "b", 2), 60, "b to run the job again")
    gate.touch()

    for p, handle in handles.items():  # each fails once (its one counted failure) and then succeeds: 2 of 2
        outcome = handle.wait(60)
        assert (outcome.status, outcome.attempts, outcome.requeues) == ("completed", 2, 1 if p in moved else 0), \
            [e.event.type for e in outcome.events]
        owner = b if p in moved else a
        eventually(lambda e=owner, j=handle.job_id, o=outcome: counted_within_max(e, settings, j, o), 30,
                   "the store to fold it")
    assert "handed back 1 running job(s) past the grace period (handover)" in a.logs()


def test_sigterm_lets_a_short_job_finish_and_hands_a_long_one_over_without_counting_it(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path, app=APP, extra=("--grace", "3"))
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path, app=APP, extra=("--grace", "3"))
    eventually(lambda: b.owned() and a.owned() and not a.owned() & b.owned(), 90, "a and b to share the partitions")
    p = min(a.owned())
    (short_key, long_key), gate, short_gate = keys_in({p}, "acme", "sigterm", 2)[p], tmp_path / "open", tmp_path / "s"
    short = client.submit("long", {"open_when": str(short_gate)}, tenant="acme", idempotency_key=short_key,
                          max_attempts=1)
    long = client.submit("long", {"open_when": str(gate)}, tenant="acme", idempotency_key=long_key, max_attempts=1)
    for handle in (short, long):
        eventually(lambda h=handle: running_on(client, settings, h.job_id, "a", 1), 60, "the jobs to run on a")

    a.signal(signal.SIGTERM)
    short_gate.touch()  # the short job ends within the grace period
    assert a.proc.wait(30) == 0
    done = short.wait(30)  # finished within the grace, by a
    assert done.status == "completed" and starters(settings, short.job_id) == ["a"]
    assert [e.event.owner for e in done.events if e.event.type == "JobSucceeded"] == ["a"] and not done.requeues
    assert requeues(settings, long.job_id) == [("a", "owner_stopped", True)]
    eventually(lambda: running_on(client, settings, long.job_id, "b", 2), 60, "b to run the long job again")
    gate.touch()
    outcome = long.wait(60)
    assert (outcome.status, outcome.attempts, outcome.requeues) == ("completed", 1, 1)  # 1 of 1: never "2 of 1"
    assert outcome.result["attempt"] == 2  # the attempt number still grows: each start stays distinct
    eventually(lambda: counted_within_max(b, settings, long.job_id, outcome), 30, "b's store to fold it")


def test_kill_minus_nine_requeues_as_owner_lost_without_counting_it(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path, app=APP)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path, app=APP)
    eventually(lambda: b.owned() and a.owned() and not a.owned() & b.owned(), 90, "a and b to share the partitions")
    p, gate = min(a.owned()), tmp_path / "open"
    handle = client.submit("long", {"open_when": str(gate)}, tenant="acme",
                           idempotency_key=keys_in({p}, "acme", "kill")[p][0], max_attempts=1)
    eventually(lambda: running_on(client, settings, handle.job_id, "a", 1), 60, "the job to run on a")

    a.signal(signal.SIGKILL)
    eventually(lambda: running_on(client, settings, handle.job_id, "b", 2), 60, "b to run the job again")
    assert requeues(settings, handle.job_id) == [("b", "owner_lost", False)]
    gate.touch()
    outcome = handle.wait(60)
    assert (outcome.status, outcome.attempts, outcome.requeues) == ("completed", 1, 1)
    eventually(lambda: counted_within_max(b, settings, handle.job_id, outcome), 30, "b's store to fold it")


def test_a_handler_that_kills_its_engine_is_dead_lettered_once_lost_more_than_max_lost(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path, app=APP)
    a.wait_active(3)
    handle = client.submit("crash", {}, tenant="acme")  # max_lost=1: one loss re-queued, the second its end
    assert a.proc.wait(60) == 1  # the handler took a down
    b = start_engine(engines, settings, "b", tmp_path, app=APP)  # finds it orphaned, re-queues it, runs it: down
    assert b.proc.wait(90) == 1
    assert requeues(settings, handle.job_id) == [("b", "owner_lost", False)]
    c = start_engine(engines, settings, "c", tmp_path, app=APP)  # finds it orphaned again: dead-letters it
    outcome = handle.wait(90)
    assert (outcome.status, outcome.reason, outcome.attempts) == ("dead", "owner_lost_repeatedly", 1), outcome.events
    assert outcome.error is not None and "its engine died 2 times while running it (max_lost=1)" in outcome.error
    assert starters(settings, handle.job_id) == ["a", "b"] and c.proc.poll() is None  # c never ran it
