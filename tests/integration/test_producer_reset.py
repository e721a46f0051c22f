"""A producer that fails for good without a fence does not wedge its partition (issue 32, item 6).

In a rehearsal librdkafka's open race turned ``INVALID_TXN_STATE`` at EndTxn into a fatal error; the engine took
it for a fence and dropped the partition for good, though the group still assigned it there: its jobs stayed
stuck. Here the same error is injected at the Kafka edge (``fatal_app``) into one commit carrying results, in a
real engine on a real broker: the partition must be set up again with a new producer by the same engine, claimed
at the next epoch, and every job around the fault must end exactly once.
"""

from __future__ import annotations

import logging
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.runtime import kafka
from engine.runtime.kafka import ports
from engine.runtime.loop.inbox import CommandReader, Inbox
from engine.runtime.loop.lifecycle import Lifecycle
from engine.runtime.loop.partition import Partition, State
from tests.integration.conftest import events_by_job, eventually, start_engine, verify_partition
from tests.integration.helpers.ports import free_port

JOBS = 9
TERMINAL = ("JobSucceeded", "JobDeadLettered", "JobCancelled", "JobRejected")


def claims(settings: Settings, partition: int) -> list[tuple[int, str]]:
    """(epoch, owner) of every OwnershipClaimed in ``partition`` of the events, in log order."""
    consumer = kafka.events_reader(settings, "test-claims")
    try:
        events = [decode_event_at(v, settings.events_topic, partition, o)
                  for o, _, v in kafka.scan_partition(consumer, settings.events_topic, partition)]
    finally:
        consumer.close()
    return [(e.epoch, e.body.owner) for e in events if isinstance(e.body, m.OwnershipClaimed)]


def resets(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "epochq_producer_resets_total")


def gated_runs(tmp: Path) -> int:
    path = tmp / "marks" / "gated.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("fault", ["fail-commit", "fail-commit-committed"])
def test_a_fatal_producer_error_that_is_no_fence_sets_the_partition_up_again(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path, fault: str) -> None:
    port = free_port()
    engine = start_engine(engines, settings, "solo", tmp_path, app="tests.integration.fatal_app:app",
                          extra=("--metrics-port", str(port)))
    engine.wait_active(3)
    gate = tmp_path / "gate"
    before = [client.submit("gated", {"open_when": str(gate)}, tenant="acme") for _ in range(JOBS)]
    eventually(lambda: gated_runs(tmp_path) >= JOBS, 60, f"{JOBS} gated handlers running")
    (tmp_path / "marks" / fault).touch()  # the next commit fails: one carrying the results below
    gate.touch()
    eventually(lambda: "transactional operation in an invalid state" in engine.logs(), 60, "the fault to fire")
    after = [client.submit("echo", {"n": n}, tenant="acme") for n in range(JOBS)]

    outcomes = client.wait_all(before + after, 90)
    stuck = [(o.job_id, o.status) for o in outcomes if not o.done]
    assert not stuck, f"jobs stuck: {stuck}\n{engine.logs()[-5000:]}"
    assert {o.status for o in outcomes} == {"completed"}
    ids = {h.job_id for h in before + after}
    terminals = {job_id: [e.event.type for e in events if not e.fenced and e.event.type in TERMINAL]
                 for job_id, events in events_by_job(settings).items() if job_id in ids}
    assert len(terminals) == 2 * JOBS and all(t == ["JobSucceeded"] for t in terminals.values()), terminals
    why = {e.event.body.reason for job_id, events in events_by_job(settings).items() if job_id in ids  # type: ignore[union-attr]
           for e in events if e.event.type == "JobRequeued" and not e.fenced}
    # the failed commit's results were lost: the engine re-queues its own attempts, never as a loss toward max_lost
    assert why == {"producer_reset"} if fault == "fail-commit" else why <= {"producer_reset"}, why

    logs = engine.logs()
    (reset,) = {int(p) for p in re.findall(r"partition (\d+): producer failed for good, not fenced", logs)}
    assert "INVALID_TXN_STATE" in logs and "dropped (fenced)" not in logs
    assert claims(settings, reset) == [(1, "solo"), (2, "solo")]  # the same engine, at the next epoch
    assert f"partition {reset}: active at epoch 2 as solo" in logs
    assert resets(port) == 1
    assert engine.proc.poll() is None
    assert engine.stop() == 0
    assert verify_partition(engine.settings(settings), reset).matches


def test_a_failed_producer_of_a_partition_the_group_moved_is_not_set_up_again(  # type: ignore[no-untyped-def]
        settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The group moves one of two partitions to another member while their producers are being replaced: only the
    one still assigned here is taken again; the other is left to its new owner (real group, real broker). A
    partition set up again and again waits longer each time (0.5 s doubling), and says so."""
    caplog.set_level(logging.WARNING, "epochq.lifecycle")
    inbox = Inbox()
    reader = CommandReader(ports.CommandSource(kafka.commands_consumer(settings), settings.commands_topic),
                           settings.commands_topic, inbox, revoke_wait_s=0.1)
    events = ports.event_log(settings, "reset-test")
    lifecycle = Lifecycle(settings, "o1", reader, events, None, None, None, 1.0)  # type: ignore[arg-type]
    other = kafka.commands_consumer(settings)
    reader.start()
    try:
        eventually(lambda: reader.assigned == {0, 1, 2}, 60, "the reader assigned every partition")
        for p in (0, 1, 2):
            lifecycle.partitions[p] = partition = Partition(p, "o1")
            partition.state = State.ACTIVE
        other.subscribe([settings.commands_topic])

        def moved() -> bool:
            other.consume(10, 0.2)  # joins the group: the cooperative rebalance moves partitions to it
            return len(reader.assigned) < 3 and bool(other.assignment())

        eventually(moved, 60, "the group to move a partition to the other member")
        kept = set(reader.assigned)
        for p in (0, 1, 2):
            lifecycle.recreate(lifecycle.partitions[p], "producer failed for good, not fenced (test)")
        assert set(lifecycle.partitions) == kept
        assert all(p.state is State.ASSIGNED and p.accept_tag > 0 for p in lifecycle.partitions.values())
        again = min(kept)
        for _ in range(4):  # its new producer fails at once, again and again: each set-up waits longer
            lifecycle.recreate(lifecycle.partitions[again], "producer failed for good, not fenced (test)")
        lifecycle.set_up()  # what the loop does next: the fifth set-up in a row waits 8 s first
        assert lifecycle.partitions[again].state is State.ASSIGNED and lifecycle.partitions[again].store is None
        assert [f"in {d} s" in caplog.text for d in ("0.5", "1.0", "2.0", "4.0", "8.0")] == [True] * 5, caplog.text
        assert f"partition {again}: producer failed for good, not fenced (test); setting it up again with a new " \
               "producer in 8.0 s (epoch 0 ends here; set-up 5 in a row)" in caplog.text
    finally:
        lifecycle.partitions.clear()
        reader.stop()
        other.close()
        lifecycle.close_all()
        events.close()
