"""A foreign record lands in <ns>.events while handlers are in flight (issue 22, item 5): no job may stay running
with no attempt in flight.

The foreign writer here is a transactional producer that leaves its transaction open on every events
partition (what the ACLs of docs/security.md forbid; a forger in dev mode, or a zombie before the new owner's
producer fenced it). The owner's next transaction lands after that record, so it cannot fold its own events in
order and catches up from the log instead. A read_committed reader sees nothing past an open transaction
(the last stable offset), so the catch-up must not stop there: the owner's own committed starts lie beyond it,
and a result decided against a store that has not folded them is dropped. The test opens the handlers' gate
while the foreign transaction is still open, then aborts it, and every job must end.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import ROOT, eventually, start_engine, verify_partition

JOBS = 6


def epochq(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engine.cli.main", *args, "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)


def marks(tmp: Path) -> int:
    path = tmp / "marks" / "gated.log"
    return len(path.read_text().splitlines()) if path.exists() else 0


def idle_since(client: Client, at: float) -> bool:
    """Whether an engine heartbeat written after ``at`` lists no running attempt (every result was taken)."""
    return any(w.seen_at_us > at * 1e6 and not w.running for w in client.workers())


def test_results_pending_when_a_foreign_transaction_lands_are_never_dropped(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    assert epochq(settings, "pause", "gated").returncode == 0
    gate = tmp_path / "gate"
    jobs = [client.submit("gated", {"open_when": str(gate)}, tenant="acme") for _ in range(JOBS)]
    assert {o.status for o in client.wait_all(jobs, 5)} == {"queued"}

    forger = Producer({**settings.kafka_config(), "transactional.id": f"{settings.namespace}-forger",
                       "transaction.timeout.ms": 120_000})
    forger.init_transactions(10)
    forger.begin_transaction()
    for p in range(3):
        forger.produce(settings.events_topic, b"forged: not an event", b"forged", partition=p)
    assert forger.flush(10) == 0  # in the log, uncommitted: every partition's stable offset stops here

    client.resume_task_type("gated", wait=0.1)  # its events lie past the open transaction: not readable yet
    eventually(lambda: marks(tmp_path) >= JOBS, 30, f"{JOBS} gated handlers running")
    assert "catching up from the log" in engine.logs()  # the owner's starts landed after the foreign record
    assert "before our own committed events" in engine.logs()  # and it waits for them, saying why
    opened = time.time()
    gate.touch()  # the results arrive while the foreign transaction is still open
    eventually(lambda: idle_since(client, opened), 30, "the engine settled every result (heartbeat: none running)")
    forger.abort_transaction(10)

    outcomes = client.wait_all(jobs, 60)
    stuck = [(o.job_id, o.status) for o in outcomes if not o.done]
    assert not stuck, f"jobs left without an attempt in flight: {stuck}\n{engine.logs()[-4000:]}"
    assert {o.status for o in outcomes} == {"completed"}
    assert engine.proc.poll() is None
    assert engine.stop() == 0
    for partition in range(3):
        assert verify_partition(engine.settings(settings), partition).matches


def test_a_result_decided_in_a_transaction_that_aborts_is_recorded_again(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    """Every job's first JobSucceeded is written in a transaction the broker aborts (abort_app): the partition
    catches up from the log and decides again, and the result must be decided again with it, not lost."""
    engine = start_engine(engines, settings, "solo", tmp_path, app="tests.integration.abort_app:app")
    engine.wait_active(3)
    jobs = [client.submit("echo", {"n": n}, tenant="acme") for n in range(JOBS)]
    outcomes = client.wait_all(jobs, 60)
    stuck = [(o.job_id, o.status) for o in outcomes if not o.done]
    assert not stuck, f"jobs left without an attempt in flight: {stuck}\n{engine.logs()[-4000:]}"
    assert {(o.status, o.attempts) for o in outcomes} == {("completed", 1)}
    assert engine.logs().count("injected: the broker aborted") >= 1
    assert engine.proc.poll() is None
    assert engine.stop() == 0
    for partition in range(3):
        assert verify_partition(engine.settings(settings), partition).matches
