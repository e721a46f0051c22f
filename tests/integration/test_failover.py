"""Failover and zombies with real engine processes on a real broker."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from confluent_kafka import Producer

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import encode_event
from engine.questions.history import job_events
from engine.questions.stores import find_job
from tests.integration.conftest import events_by_job, eventually, start_engine, verify_partition


def valid_terminals(settings: Settings, job_id: str) -> list[str]:
    return [e.event.type for e in job_events(settings, job_id)
            if not e.fenced and e.event.type in ("JobSucceeded", "JobDeadLettered", "JobCancelled")]


def test_kill_minus_nine_loses_no_job(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path)
    b.wait_active(1)
    handles = client.submit_many([{"task_type": "slow", "payload": {"seconds": 0.1}, "tenant": f"t{i % 4}"}
                                  for i in range(120)])
    marks = tmp_path / "marks" / "slow.log"
    eventually(lambda: marks.exists() and len(marks.read_text().splitlines()) >= 15, 60, "jobs to start")
    a.signal(signal.SIGKILL)

    ids = {h.job_id for h in handles}
    terminals: dict[str, list[str]] = {}

    def all_final() -> bool:
        terminals.clear()
        for job_id, events in events_by_job(settings).items():
            if job_id in ids:
                terminals[job_id] = [e.event.type for e in events if not e.fenced and e.event.type in
                                     ("JobSucceeded", "JobDeadLettered", "JobCancelled")]
        return len(terminals) == 120 and all(terminals.values())

    eventually(all_final, 120, "every job to finish")
    assert len(terminals) == 120 and all(t == ["JobSucceeded"] for t in terminals.values()), terminals
    # a partition whose jobs a finished before it died may still be restoring in b: its store is checked below
    eventually(lambda: b.owned() == {0, 1, 2}, 60, "b to take every partition over")
    survivor = b.settings(settings)
    eventually(lambda: all(completed_in_view(survivor, h.job_id) for h in handles), 30, "b's view to fold every end")
    assert b.stop() == 0
    for p in range(3):
        assert verify_partition(survivor, p).matches


def test_zombie_writes_are_fenced(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    handle = client.submit("slow", {"seconds": 4}, tenant="acme")
    eventually(lambda: client.status(handle.job_id).status == "running", 30, "the job to run on a")
    a.signal(signal.SIGSTOP)
    b = start_engine(engines, settings, "b", tmp_path)
    b.wait_active(3, timeout=90)
    outcome = handle.wait(60)
    a.signal(signal.SIGCONT)
    # a runs again with its attempt over (the 4 s sleep ended while it was stopped), and its late result is
    # refused: by a itself, once the group told it the partition is gone, or by the broker, which fences the
    # transaction that carries it (b's producer took the partition's transactional id over)
    late_result = "|".join([rf"dropping result of job {handle.job_id} attempt 1",
                            rf"partition {handle.partition} fenced at epoch 1",
                            rf'Failed to add partition "{re.escape(settings.events_topic)}" \[{handle.partition}\] '
                            r"to transaction: Broker: Producer attempted an operation with an old epoch"])
    eventually(lambda: re.search(late_result, a.logs()), 60, "a's late result to be refused")
    eventually(lambda: re.search(rf"partition {handle.partition}: (dropped|handed back)", a.logs()), 60,
               "a to give the job's partition up")

    assert outcome.status == "completed" and outcome.result["epoch"] == 2
    history = job_events(settings, handle.job_id)
    requeued = [e for e in history if e.event.type == "JobRequeued"]
    assert [e.event.body for e in requeued] == [m.JobRequeued(previous_epoch=1, attempt=1, reason="owner_lost")]
    assert valid_terminals(settings, handle.job_id) == ["JobSucceeded"]

    # a stale write that does land (what a zombie's write would be, had the broker let it through): the fold fences it
    stale = m.Event("zombie-1", handle.job_id, "acme", 1, "a", time.time_ns() // 1000,
                    m.JobFailed(1, "Zombie", "late write", 1))
    producer = Producer({"bootstrap.servers": settings.require_bootstrap()})
    producer.produce(settings.events_topic, encode_event(stale), handle.job_id.encode(),
                     partition=handle.partition)
    producer.flush(10)
    history = eventually(lambda: (h := job_events(settings, handle.job_id)) and
                         any(e.event.event_id == "zombie-1" for e in h) and h, 20, "the stale write")
    # every epoch-1 write of a's after the requeue: only the stale one (a's own late result never reached the log),
    # and it does not count
    late_a = [e for e in history if e.event.owner == "a" and e.event.epoch == 1 and e.offset > requeued[0].offset]
    assert [(e.event.event_id, e.fenced) for e in late_a] == [("zombie-1", True)], late_a
    assert client.status(handle.job_id).status == "completed"
    eventually(lambda: completed_in_view(b.settings(settings), handle.job_id), 30, "b's view to fold the end")
    assert b.stop() == 0
    assert verify_partition(b.settings(settings), handle.partition).matches


def test_processes_2_share_the_partitions_and_one_sigterm_stops_both(settings: Settings, client: Client, engines,  # type: ignore[no-untyped-def]
                                                                      tmp_path: Path) -> None:
    group = start_engine(engines, settings, "pair", tmp_path, extra=("--processes", "2"))
    group.wait_active(3)
    eventually(lambda: "as pair-0" in group.logs() and "as pair-1" in group.logs(), 60,
               "both members to own partitions")
    handles = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": f"t{n % 3}"} for n in range(60)])
    assert all(h.wait(60).status == "completed" for h in handles)
    owners = {e.event.owner for h in handles for e in client.status(h.job_id).events if e.event.type == "JobStarted"}
    assert owners <= {"pair-0", "pair-1"} and len(owners) == 2, owners  # two members, each running jobs
    group.signal(signal.SIGTERM)
    assert group.proc.wait(40) == 0
    assert group.logs().count("shutting down") == 2


def completed_in_view(settings: Settings, job_id: str) -> bool:
    """Whether the view of ``settings.state_dir`` has the job completed."""
    found = find_job(settings, job_id)
    return found is not None and found[1].state.value == "completed"
