"""Remote workers against a real broker and one Python engine shared by the module: a cancel reaches a full worker
(every slot busy) at once, and the example workers in Node.js and Go (examples/workers/) take attempts, heartbeat
them past their lease with progress, send ctx.produce records with a success, stop on a cancel, and have their
result refused once they were stopped past their lease."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.client import Client, JobHandle
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.runtime.topics import ensure_topics
from tests.integration.conftest import ROOT, EngineProcess, eventually, stop_process
from tests.integration.test_workers import APP, WorkerProcess, bodies, lapsed, one_end_per_attempt, start_worker

WORKERS = ROOT / "examples" / "workers"
NODE, GO = WORKERS / "node", WORKERS / "go"


def built(language: str) -> list[str]:
    """The worker's command line, built first if needed (a missing toolchain fails, never skips): ``npm ci`` unless
    node_modules is newer than the lock file; ``go build`` unless the binary is newer than its sources."""
    if language == "node":
        assert shutil.which("node") and shutil.which("npm"), "node and npm are needed (make test needs Node.js)"
        marker = NODE / "node_modules" / ".package-lock.json"
        if not marker.exists() or (NODE / "package-lock.json").stat().st_mtime > marker.stat().st_mtime:
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE, check=True,
                           timeout=300)
        return ["node", str(NODE / "worker.js")]
    assert shutil.which("go"), "go is needed (make test needs Go)"
    binary = GO / "epochq-worker"
    sources = [GO / "main.go", GO / "go.mod", GO / "go.sum"]
    if not binary.exists() or max(p.stat().st_mtime for p in sources) > binary.stat().st_mtime:
        subprocess.run(["go", "build", "-buildvcs=false", "-trimpath", "-o", str(binary), "."], cwd=GO, check=True,
                       timeout=600)
    return [str(binary)]


@pytest.fixture(scope="module")
def shared(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Client]]:
    """One namespace and one engine (deciding, running no remote task) for the whole module, and a client."""
    tmp = tmp_path_factory.mktemp("remote-workers")
    settings = load_settings(bootstrap=bootstrap, namespace=f"t{uuid.uuid4().hex[:10]}", state_dir=str(tmp / "state"))
    ensure_topics(settings, partitions=3)
    engine = EngineProcess(settings, "a", tmp, app=APP)
    try:
        engine.wait_active(3)
        with Client(settings) as client:
            yield settings, client
    finally:
        engine.stop()


@pytest.fixture
def settings(shared: tuple[Settings, Client]) -> Settings:
    """The module's namespace (overrides conftest's fresh one per test)."""
    return shared[0]


@pytest.fixture
def client(shared: tuple[Settings, Client]) -> Client:
    """The module's client."""
    return shared[1]


@pytest.fixture
def workers() -> Iterator[dict[str, WorkerProcess]]:
    """Python workers by name (test_workers.py's), each stopped at teardown, even on failure."""
    started: dict[str, WorkerProcess] = {}
    yield started
    for worker in started.values():
        worker.stop()


def cancelled_at_once(client: Client, settings: Settings, handle: JobHandle, started: Callable[[], bool]) -> None:
    """Once ``started`` holds, cancel the job: it ends cancelled, attempt 1, no lease lapsed. Its handler would run
    60 s, its worker's only slot busy all along: the wait (30 s) ends long before, or the cancel did not reach it."""
    eventually(started, 60, "the attempt to start")
    client.cancel(handle.job_id, reason="enough")
    outcome = handle.wait(30)
    assert (outcome.status, outcome.attempts) == ("cancelled", 1), outcome
    found = bodies(settings, handle.job_id)
    assert not any(isinstance(b, m.JobFailed) and b.error_type == "lease_expired" for b in found), found
    assert [type(b).__name__ for b in found if isinstance(b, (m.JobCancelRequested, m.JobCancelled))] == \
        ["JobCancelRequested", "JobCancelled"]
    one_end_per_attempt(found)


def test_a_cancel_reaches_a_worker_whose_every_slot_is_busy_while_its_attempt_runs(
        settings: Settings, client: Client, workers: dict[str, WorkerProcess], tmp_path: Path) -> None:
    workers["full"] = WorkerProcess(settings, "full", tmp_path, concurrency=1)
    handle = client.submit("remote.until_cancelled", {}, tenant="acme")
    log = tmp_path / "marks" / "cancel.log"
    cancelled_at_once(client, settings, handle, lambda: log.exists() and handle.job_id in log.read_text())


@pytest.fixture(params=["node", "go"])
def other_worker(request: pytest.FixtureRequest, settings: Settings,
                 tmp_path: Path) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], Path]]]:
    """Starts the example worker of pool gpu, one slot; stopped at teardown."""
    language = request.param
    command = built(language)
    log_path = tmp_path / f"{language}-worker.log"
    log = open(log_path, "w")
    started: list[subprocess.Popen[bytes]] = []
    dash = "--" if language == "node" else "-"
    options = [f"{dash}worker-id", f"{language}-1", f"{dash}concurrency", "1"]

    def start() -> tuple[subprocess.Popen[bytes], Path]:
        args = [*options, settings.require_bootstrap(), settings.namespace, "gpu"] if language == "go" else \
            [settings.require_bootstrap(), settings.namespace, "gpu", *options]
        started.append(subprocess.Popen([*command, *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
        return started[-1], log_path

    yield start
    for proc in started:
        stop_process(proc, log)


def taken(log_path: Path, job_id: str) -> bool:
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    return any(line.get("taken") == job_id for line in lines)


def test_a_worker_in_another_language_runs_attempts_heartbeats_progress_produces_stops_on_a_cancel_and_its_late_result_is_refused(  # noqa: E501
        settings: Settings, client: Client, workers: dict[str, WorkerProcess], other_worker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from tests.integration.test_effects import committed_records, make_topic

    proc, log_path = other_worker()
    lang = log_path.name.split("-")[0]
    out = make_topic(settings, f"out.{lang}.{settings.namespace}")
    echo = client.submit("remote.echo", {"n": 3}, tenant="acme").wait(60)
    assert echo.status == "completed" and echo.result["lang"] == lang and echo.result["echo"] == {"n": 3}, echo
    emit = client.submit("remote.emit", {"topic": out}, tenant="acme").wait(60)
    assert emit.status == "completed", emit
    assert committed_records(settings, out) == [(emit.job_id.encode(), b"attempt 1")]  # with its success, once

    slow = client.submit("remote.slow", {"seconds": 4}, tenant="acme")  # lease 3 s: only heartbeats keep it
    outcome = slow.wait(60)
    assert outcome.status == "completed" and outcome.result == {"attempt": 1, "lang": lang, "pid": proc.pid}
    progressed = [b for b in bodies(settings, slow.job_id) if isinstance(b, m.JobProgressed)]
    assert progressed and all(b.value is not None and 0 < b.value <= 1 and b.message.startswith("second")
                              for b in progressed), progressed

    until = client.submit("remote.until_cancelled", {}, tenant="acme")  # its one slot busy: a full worker
    cancelled_at_once(client, settings, until, lambda: taken(log_path, until.job_id))

    stopped = client.submit("remote.slow", {"seconds": 2}, tenant="acme")
    eventually(lambda: taken(log_path, stopped.job_id), 60, f"the {lang} worker to take the attempt")
    proc.send_signal(signal.SIGSTOP)  # holds attempt 1, sends no heartbeat
    python = start_worker(workers, settings, "py", tmp_path)
    outcome = stopped.wait(90)
    assert outcome.status == "completed" and outcome.result["pid"] == python.proc.pid, outcome
    proc.send_signal(signal.SIGCONT)

    def refused() -> list[m.CommandRefused]:
        found = [b for b in bodies(settings, stopped.job_id)
                 if isinstance(b, m.CommandRefused) and b.command == "ReportAttempt"]
        assert found, "no refusal yet"
        return found

    assert eventually(refused, 60, f"the {lang} worker's late result to be refused")[0].reason.startswith("stale_token")
    found = bodies(settings, stopped.job_id)
    lapsed(found, outcome.attempts)
    one_end_per_attempt(found)
