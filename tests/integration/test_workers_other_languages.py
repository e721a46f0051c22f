"""The example workers in Node.js and Go (examples/workers/) against a real broker and a Python engine: each takes
an attempt, heartbeats it past its lease, reports the result; stopped past its lease, its result is refused."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from tests.integration.conftest import ROOT, eventually, start_engine, stop_process
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


@pytest.fixture
def workers() -> Iterator[dict[str, WorkerProcess]]:
    """Python workers by name (test_workers.py's), each stopped at teardown, even on failure."""
    started: dict[str, WorkerProcess] = {}
    yield started
    for worker in started.values():
        worker.stop()


@pytest.fixture(params=["node", "go"])
def other_worker(request: pytest.FixtureRequest, settings: Settings,
                 tmp_path: Path) -> Iterator[Callable[[], tuple[subprocess.Popen[bytes], Path]]]:
    """Starts the example worker of pool gpu (once the engine made the pool's dispatch topic); stopped at teardown."""
    language = request.param
    command = built(language)
    log_path = tmp_path / f"{language}-worker.log"
    log = open(log_path, "w")
    started: list[subprocess.Popen[bytes]] = []
    flag = "--worker-id" if language == "node" else "-worker-id"
    options = [flag, f"{language}-1"]

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


def test_a_worker_in_another_language_runs_attempts_heartbeats_past_the_lease_and_its_late_result_is_refused(
        settings: Settings, client: Client, engines, workers, other_worker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    start_engine(engines, settings, "a", tmp_path, app=APP).wait_active(3)
    proc, log_path = other_worker()
    lang = log_path.name.split("-")[0]
    echo = client.submit("remote.echo", {"n": 3}, tenant="acme").wait(60)
    assert echo.status == "completed" and echo.result["lang"] == lang and echo.result["echo"] == {"n": 3}, echo
    slow = client.submit("remote.slow", {"seconds": 5}, tenant="acme")  # lease 3 s: only heartbeats keep it
    outcome = slow.wait(60)
    assert outcome.status == "completed" and outcome.result == {"attempt": 1, "lang": lang, "pid": proc.pid}

    stopped = client.submit("remote.slow", {"seconds": 4}, tenant="acme")
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
