"""Remote workers against a real broker: an engine that decides, workers of a pool that run (docs/workers.md).

Every attempt's end is in the log once: a success, a failure retried, a worker killed mid-run (its lease
lapses: ``lease_expired``, retried on another worker), a SIGSTOPped worker resumed after its lease (its
result refused: ``stale_token``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from tests.integration.conftest import (
    ROOT, EngineProcess, eventually, events_by_job, module_namespace, start_engine, stop_process,
)

APP = "tests.integration.remote_app:app"
TERMINAL = (m.JobSucceeded, m.JobFailed)


class WorkerProcess:
    """An ``epochq worker run`` in a child process."""

    def __init__(self, settings: Settings, name: str, tmp: Path, pool: str = "gpu", concurrency: int = 4):
        self.name, self.log_path = name, tmp / f"worker-{name}.log"
        env = {**os.environ, "EPOCHQ_TEST_MARKS": str(tmp / "marks"), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "engine.cli.main", "worker", "run", APP, "--bootstrap",
               settings.require_bootstrap(), "--namespace", settings.namespace, "--pool", pool,
               "--concurrency", str(concurrency), "--worker-id", name, "--grace", "2"]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def logs(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        return stop_process(self.proc, self.log)


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[dict[str, WorkerProcess]]:
    """Workers by name, each stopped at teardown, even on failure."""
    started: dict[str, WorkerProcess] = {}
    yield started
    for worker in started.values():
        worker.stop()


def start_worker(workers: dict[str, WorkerProcess], settings: Settings, name: str, tmp: Path) -> WorkerProcess:
    workers[name] = WorkerProcess(settings, name, tmp)
    return workers[name]


@dataclass
class Stack:
    """One engine of the remote app and one worker of pool ``gpu`` (``w1``) on a namespace of their own, shared by the
    tests of this module that neither stop nor signal them; each of those tests uses a tenant of its own."""

    settings: Settings
    client: Client
    engine: EngineProcess
    worker: WorkerProcess
    tmp: Path


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The module's shared engine and worker (every one stopped at the module's end, even on failure)."""
    tmp = tmp_path_factory.mktemp("remote")
    settings = module_namespace(bootstrap, tmp)
    engine = EngineProcess(settings, "a", tmp, app=APP)
    worker = WorkerProcess(settings, "w1", tmp)
    client = Client(settings)
    try:
        engine.wait_active(3)
        yield Stack(settings, client, engine, worker, tmp)
    finally:
        client.close()
        worker.stop()
        engine.stop()


@pytest.fixture
def tenant() -> str:
    """A tenant of the test's own on the shared stack."""
    return f"acme-{uuid.uuid4().hex[:8]}"


def marks(tmp: Path) -> list[list[str]]:
    path = tmp / "marks" / "slow.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def bodies(settings: Settings, job_id: str) -> list[m.EventBody]:
    return [logged.event.body for logged in events_by_job(settings).get(job_id, [])]


def one_end_per_attempt(found: list[m.EventBody]) -> None:
    """Each attempt started has at most one end in the log, and the job at most one success."""
    ends = [(type(b).__name__, b.attempt) for b in found if isinstance(b, TERMINAL)]
    assert len({a for _, a in ends}) == len(ends), ends
    assert sum(isinstance(b, m.JobSucceeded) for b in found) <= 1, ends


def test_remote_attempts_succeed_and_a_failure_is_retried_while_local_tasks_run_in_the_engine(
        stack: Stack, tenant: str) -> None:
    settings, client = stack.settings, stack.client
    echo = client.submit("remote.echo", {"n": 1}, tenant=tenant)
    flaky = client.submit("remote.flaky", {}, tenant=tenant)
    local = client.submit("local.echo", {}, tenant=tenant)
    done = client.wait_all([echo, flaky, local], 60)
    assert [o.status for o in done] == ["completed"] * 3, done
    assert done[0].result["echo"] == {"n": 1} and done[0].result["pid"] == stack.worker.proc.pid
    assert done[2].result["pid"] == stack.engine.proc.pid  # the embedded default: run in the engine's process
    assert done[1].attempts == 2 and done[1].result == {"attempt": 2}
    flaky_events = bodies(settings, flaky.job_id)
    failed = [b for b in flaky_events if isinstance(b, m.JobFailed)]
    assert [(f.attempt, f.error_type) for f in failed] == [(1, "RuntimeError")]
    for handle in (echo, flaky):
        one_end_per_attempt(bodies(settings, handle.job_id))


def test_a_worker_killed_mid_run_loses_its_lease_and_the_attempt_is_retried_on_another(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "a", tmp_path, app=APP)
    w1, w2 = start_worker(workers, settings, "w1", tmp_path), start_worker(workers, settings, "w2", tmp_path)
    engine.wait_active(3)
    handle = client.submit("remote.slow", {"seconds": 8, "then": 0}, tenant="acme")  # only attempt 1 is long
    first = eventually(lambda: next((line for line in marks(tmp_path) if line[1] == "1"), None), 60,
                       "attempt 1 to start on a worker")
    victim = w1 if int(first[2]) == w1.proc.pid else w2
    survivor = w2 if victim is w1 else w1
    victim.proc.send_signal(signal.SIGKILL)
    outcome = handle.wait(90)
    assert outcome.status == "completed" and outcome.result["pid"] == survivor.proc.pid, outcome
    found = bodies(settings, handle.job_id)
    lapsed(found, outcome.attempts)
    one_end_per_attempt(found)


def lapsed(found: list[m.EventBody], attempts: int) -> None:
    """Every attempt before the last one failed for its lease (attempt 1's worker died; a retry dispatched to a
    partition of the dead worker's waits there until the group's session times out, and lapses too), and the last
    one succeeded."""
    failed = [(f.attempt, f.error_type) for f in found if isinstance(f, m.JobFailed)]
    assert failed == [(n, "lease_expired") for n in range(1, attempts)] and attempts >= 2, found
    assert [b.attempt for b in found if isinstance(b, m.JobSucceeded)] == [attempts]


def test_a_worker_resumed_after_its_lease_lapsed_has_its_result_refused_by_the_token(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "a", tmp_path, app=APP)
    w1 = start_worker(workers, settings, "w1", tmp_path)
    engine.wait_active(3)
    handle = client.submit("remote.slow", {"seconds": 4, "then": 0}, tenant="acme")  # only attempt 1 is long
    eventually(lambda: any(line[1] == "1" and line[3] == "started" for line in marks(tmp_path)), 60,
               "attempt 1 to start on w1")
    w1.proc.send_signal(signal.SIGSTOP)  # a zombie: holds the attempt, sends no heartbeat
    start_worker(workers, settings, "w2", tmp_path)
    outcome = handle.wait(90)
    assert outcome.status == "completed" and outcome.result["pid"] == workers["w2"].proc.pid, outcome
    w1.proc.send_signal(signal.SIGCONT)  # wakes past its lease: finishes attempt 1 and reports it, too late

    def refused() -> list[m.CommandRefused]:
        found = [b for b in bodies(settings, handle.job_id)
                 if isinstance(b, m.CommandRefused) and b.command == "ReportAttempt"]
        assert found, "no refusal yet"
        return found

    refusals = eventually(refused, 60, "the zombie's result to be refused")
    assert refusals[0].reason.startswith("stale_token"), refusals
    found = bodies(settings, handle.job_id)
    lapsed(found, outcome.attempts)
    one_end_per_attempt(found)


def test_a_job_of_a_pool_no_worker_serves_waits_visibly_and_runs_once_a_worker_comes(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.integration.helpers.cli import epochq
    from tests.integration.helpers.ports import free_port

    port = free_port()
    start_engine(engines, settings, "a", tmp_path, app=APP, extra=("--metrics-port", str(port))).wait_active(3)
    handle = client.submit("remote.echo", {"n": 2}, tenant="acme")

    def said() -> str:
        done = epochq(settings, "status", handle.job_id)
        assert "waiting for a worker of pool gpu" in done.stdout, done.stdout + done.stderr
        return done.stdout

    assert eventually(said, 30, "status to name the pool").startswith(
        f"job {handle.job_id}: queued (waiting for a worker of pool gpu)")
    assert client.status(handle.job_id).status == "queued"  # it waits: never started, never dead-lettered

    def gauges() -> dict[str, float]:  # sampled every 5 s
        found = pool_gauges(port, "gpu")
        assert found.get("epochq_pool_queued") == 1, found
        return found

    assert eventually(gauges, 30, "the pool's queued job sampled") == {
        "epochq_pool_queued": 1, "epochq_pool_slots": 0, "epochq_pool_in_flight": 0}
    start_worker(workers, settings, "w1", tmp_path)
    assert handle.wait(60).status == "completed"
    eventually(lambda: pool_gauges(port, "gpu")["epochq_pool_queued"] == 0, 30, "the pool's queue sampled empty")


def pool_gauges(port: int, pool: str) -> dict[str, float]:
    """The engine's ``epochq_pool_*`` gauges of ``pool``, from its metrics endpoint."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name in ("epochq_pool_queued", "epochq_pool_slots", "epochq_pool_in_flight")
            and s.labels.get("pool") == pool}


def test_an_engine_run_with_no_execute_decides_only_and_a_worker_of_pool_default_runs_its_tasks(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "a", tmp_path, app=APP, extra=("--no-execute",))
    workers["d"] = WorkerProcess(settings, "d", tmp_path, pool="default")
    start_worker(workers, settings, "g", tmp_path)
    engine.wait_active(3)
    local, echo = client.submit("local.echo", {}, tenant="acme"), client.submit("remote.echo", {}, tenant="acme")
    done = client.wait_all([local, echo], 60)
    assert [o.status for o in done] == ["completed", "completed"], done
    assert done[0].result["pid"] == workers["d"].proc.pid  # not the engine's: it runs nothing itself
    assert done[1].result["pid"] == workers["g"].proc.pid  # a task's own pool still holds


def test_a_remote_handler_s_records_are_written_with_its_success_only_and_a_refused_one_fails_its_attempt(
        stack: Stack, tenant: str) -> None:
    from tests.integration.test_effects import committed_records, make_topic, set_max_message_bytes

    settings, client = stack.settings, stack.client
    out = make_topic(settings, f"out.{settings.namespace}")  # not the namespace's: ctx.produce refuses those
    shrinking = make_topic(settings, f"shrinking.{settings.namespace}", 1)
    handles = [client.submit("remote.emit", {"topic": out, "fail_first": n % 2 == 0}, tenant=tenant)
               for n in range(6)]
    assert [o.status for o in client.wait_all(handles, 90)] == ["completed"] * 6
    written = committed_records(settings, out)
    assert sorted(k for k, _ in written) == sorted(h.job_id.encode() for h in handles)  # once each, failures none
    assert sorted(v for _, v in written) == sorted([b"attempt 2", b"attempt 1"] * 3)
    assert client.submit("remote.emit.once", {"topic": shrinking, "size": 5000}, tenant=tenant).wait(60).status \
        == "completed"
    set_max_message_bytes(settings, shrinking, 2000)  # after the worker checked the topic: only the broker knows
    refused = client.submit("remote.emit.once", {"topic": shrinking, "size": 5000}, tenant=tenant)
    beside = client.submit("remote.emit", {"topic": out}, tenant=tenant)
    end = refused.wait(60)
    assert end.status == "dead" and "MSG_SIZE_TOO_LARGE" in (end.error or ""), end.error
    assert beside.wait(60).status == "completed"
    assert len(committed_records(settings, shrinking, 1)) == 1  # the first job's


def test_a_cancel_of_a_remote_attempt_reaches_its_worker_and_the_job_ends_cancelled(
        stack: Stack, tenant: str) -> None:
    settings, client = stack.settings, stack.client
    handle = client.submit("remote.until_cancelled", {}, tenant=tenant)
    log = stack.tmp / "marks" / "cancel.log"
    eventually(lambda: log.exists() and handle.job_id in log.read_text(), 60, "the attempt to start on w1")
    client.cancel(handle.job_id, reason="enough")
    outcome = handle.wait(60)
    assert outcome.status == "cancelled", outcome
    found = bodies(settings, handle.job_id)
    assert not any(isinstance(b, m.JobFailed) and b.error_type == "lease_expired" for b in found), found
    assert [type(b).__name__ for b in found if isinstance(b, (m.JobCancelRequested, m.JobCancelled))] == \
        ["JobCancelRequested", "JobCancelled"]
    one_end_per_attempt(found)


def test_a_remote_job_that_waited_for_jobs_reads_their_results(stack: Stack, tenant: str) -> None:
    client = stack.client
    first = client.submit("remote.echo", {"n": 7}, tenant=tenant)
    after = client.submit("remote.deps", {}, tenant=tenant, depends_on=[first.job_id])
    outcome = after.wait(60)
    assert outcome.status == "completed", outcome
    assert outcome.result["seen"][first.job_id]["echo"] == {"n": 7}, outcome.result


def test_a_forged_remote_result_with_a_record_for_the_namespace_s_events_writes_nothing_there(
        stack: Stack, tenant: str) -> None:
    """A worker (or anyone who can write commands) that knows a running attempt's token cannot have the owner write
    a record into <ns>.events: the owner refuses the namespace's topics as ctx.produce does in process."""
    from engine.contract.codec import encode_command
    from engine.domain.fence import fencing_token
    from engine.runtime import kafka
    from engine.runtime.remote.dispatch import encode_records
    from engine.runtime.execution.outputs import OutputRecord

    settings, client, gate = stack.settings, stack.client, stack.tmp / f"open-{tenant}"
    handle = client.submit("remote.slow", {"seconds": 60, "open_when": str(gate)}, tenant=tenant)
    try:
        started = eventually(lambda: next((lg.event for lg in events_by_job(settings).get(handle.job_id, [])
                                           if isinstance(lg.event.body, m.JobStarted)), None), 60,
                             "the attempt to start")
        forged = encode_records([OutputRecord(settings.events_topic, b"forged", handle.job_id.encode())])
        body = m.ReportAttempt(1, fencing_token(started.epoch, 1), "succeeded", 1, b"{}", records=forged)
        producer = kafka.command_producer(settings)
        kafka.produce(producer, settings.commands_topic, encode_command(
            m.Command(str(uuid.uuid4()), handle.job_id, tenant, 1, body)), handle.job_id.encode())
        producer.flush(10)
        outcome = handle.wait(60)
    finally:
        gate.touch()  # the worker's own attempt ends (its result comes after the verdict)
    assert outcome.status == "dead" and outcome.reason == "validation_failed", outcome  # never retried
    assert f"topic {settings.events_topic} is a topic of namespace" in (outcome.error or ""), outcome.error
    reader = kafka.events_reader(settings, "test-forged")
    try:
        values = [v for p in range(3) for _, _, v in kafka.scan_partition(reader, settings.events_topic, p)]
    finally:
        reader.close()
    assert values and b"forged" not in values


def test_sigterm_of_the_engine_hands_a_running_remote_attempt_to_the_next_owner_who_accepts_its_result(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    a, b = survived_takeover(settings, client, engines, workers, tmp_path, signal.SIGTERM)
    assert a.proc.returncode == 0
    assert "handed back" in a.logs()


def test_kill_minus_nine_of_the_engine_leaves_a_running_remote_attempt_to_the_next_owner_who_adopts_it(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    survived_takeover(settings, client, engines, workers, tmp_path, signal.SIGKILL)


def survived_takeover(settings: Settings, client: Client, engines, workers,  # type: ignore[no-untyped-def]
                      tmp: Path, sig: int):
    """A remote job runs on a worker for a partition of engine a until b holds it; a gets ``sig``; b takes the
    partition over, adopts the attempt (no re-queue, no new attempt) and decides the worker's result: the job
    completes once, with attempt 1. Returns (a, b)."""
    from tests.integration.test_handover import keys_in, requeues, starters

    a, b = start_engine(engines, settings, "a", tmp, app=APP), start_engine(engines, settings, "b", tmp, app=APP)
    w1 = start_worker(workers, settings, "w1", tmp)
    eventually(lambda: b.owned() and a.owned() and not a.owned() & b.owned(), 90, "a and b to share the partitions")
    p, gate = min(a.owned()), tmp / "open"
    handle = client.submit("remote.slow", {"seconds": 60, "open_when": str(gate)}, tenant="acme",
                           idempotency_key=keys_in({p}, "acme", f"adopt-{sig}")[p][0])
    eventually(lambda: any(line[:2] == [handle.job_id, "1"] and line[3] == "started" for line in marks(tmp)), 60,
               "attempt 1 to start on w1")
    a.signal(sig)
    a.proc.wait(30)
    eventually(lambda: p in b.owned(), 60, "b to take a's partition")
    gate.touch()  # the attempt ends only now: its result is b's to decide
    outcome = handle.wait(90)
    found = bodies(settings, handle.job_id)
    assert (outcome.status, outcome.attempts, outcome.requeues) == ("completed", 1, 0), \
        [type(f).__name__ for f in found]
    assert outcome.result == {"attempt": 1, "pid": w1.proc.pid}
    assert requeues(settings, handle.job_id) == [] and starters(settings, handle.job_id) == ["a"]
    assert not [f for f in found if isinstance(f, m.CommandRefused)], found  # the worker's result counted
    assert [e.event.owner for e in outcome.events if e.event.type == "JobSucceeded"] == ["b"]
    assert f"partition {p}: adopted 1 attempt(s) out with remote workers" in b.logs()
    one_end_per_attempt(found)
    return a, b


def test_an_adopted_attempt_whose_worker_stops_heartbeating_lapses_under_the_new_owner_and_is_retried(
        settings: Settings, client: Client, engines, workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.integration.test_handover import keys_in, requeues

    a = start_engine(engines, settings, "a", tmp_path, app=APP)
    b = start_engine(engines, settings, "b", tmp_path, app=APP)
    w1 = start_worker(workers, settings, "w1", tmp_path)
    eventually(lambda: b.owned() and a.owned() and not a.owned() & b.owned(), 90, "a and b to share the partitions")
    p = min(a.owned())
    # attempt 1 runs on until w1 is stopped (its gate never opens); the retry on w2 ends at once
    handle = client.submit("remote.slow", {"seconds": 60, "open_when": str(tmp_path / "never"), "then": 0},
                           tenant="acme", idempotency_key=keys_in({p}, "acme", "adopt-lapse")[p][0])
    eventually(lambda: any(line[:2] == [handle.job_id, "1"] and line[3] == "started" for line in marks(tmp_path)),
               60, "attempt 1 to start on w1")
    a.signal(signal.SIGTERM)
    eventually(lambda: f"partition {p}: adopted 1 attempt(s)" in b.logs(), 60, "b to adopt the attempt")
    w1.proc.send_signal(signal.SIGSTOP)  # no more heartbeats: the adopted lease lapses under b
    w2 = start_worker(workers, settings, "w2", tmp_path)
    outcome = handle.wait(90)
    assert outcome.status == "completed" and outcome.result["pid"] == w2.proc.pid, outcome
    found = bodies(settings, handle.job_id)
    lapsed(found, outcome.attempts)
    assert [e.event.owner for e in outcome.events if e.event.type == "JobFailed"][:1] == ["b"]
    assert requeues(settings, handle.job_id) == []
    one_end_per_attempt(found)
    w1.proc.send_signal(signal.SIGCONT)
