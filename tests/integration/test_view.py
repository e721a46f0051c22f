"""The view against a real broker: every partition folded into one state directory, whoever owns them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from engine.client import Client
from engine.config import Settings
from projections.store import view_root
from tests.integration.conftest import ROOT, EngineProcess, eventually, start_engine, stop_process
from tests.integration.helpers.ports import free_port



def cli(settings: Settings, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace,
             "--state-dir", str(state_dir)]
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *args, *flags], capture_output=True, text=True,
                          cwd=ROOT)


class ViewProcess:
    """An ``epochq view run`` in a child process."""

    def __init__(self, settings: Settings, state_dir: Path, log_path: Path, *extra: str):
        self.state_dir, self.log_path = state_dir, log_path
        self.log = open(log_path, "w")
        cmd = [sys.executable, "-m", "engine.cli.main", "view", "run", "--bootstrap", settings.require_bootstrap(),
               "--namespace", settings.namespace, "--state-dir", str(state_dir), *extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def logs(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        return stop_process(self.proc, self.log)


@pytest.fixture
def views(tmp_path: Path) -> Iterator[list[ViewProcess]]:
    started: list[ViewProcess] = []
    yield started
    for view in started:
        view.stop()


def start_view(views: list[ViewProcess], settings: Settings, state_dir: Path, *extra: str) -> ViewProcess:
    view = ViewProcess(settings, state_dir, state_dir.parent / f"view-{len(views)}.log", *extra)
    views.append(view)
    return view


def status(settings: Settings, state_dir: Path) -> dict[str, Any]:
    run = cli(settings, state_dir, "view", "status", "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def caught_up(settings: Settings, state_dir: Path) -> dict[str, Any]:
    """The ``view status --json`` document once a view runs there and has folded the log's end (read in this process:
    a wait asks it often; the command itself is run by test_a_view_picks_up_partitions_added_to_the_topic)."""
    from engine.questions.view_status import view_status

    now = view_status(settings.model_copy(update={"state_dir": state_dir})).as_json(time.time_ns() // 1000)
    assert now["running"] and now["lag"] == 0, now
    return now


def listed(settings: Settings, state_dir: Path, *args: str) -> dict[str, Any]:
    run = cli(settings, state_dir, "jobs", "list", "--json", "--limit", "100", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def two_owners(settings: Settings, engines: list[EngineProcess], tmp_path: Path) -> tuple[EngineProcess, ...]:
    a = start_engine(engines, settings, "a", tmp_path, extra=("--no-view",))
    b = start_engine(engines, settings, "b", tmp_path, extra=("--no-view",))
    eventually(lambda: _split(a, b), 90)
    return a, b


def _split(a: EngineProcess, b: EngineProcess) -> bool:
    held = [_active(e.logs()) for e in (a, b)]
    assert all(held) and not held[0] & held[1], held  # each owns some (a partition may still be moving)
    return True


def _active(logs: str) -> set[str]:
    """The partitions whose newest ownership line in ``logs`` says active."""
    state: dict[str, bool] = {}
    for line in logs.splitlines():
        words = line.split()
        if "partition" in words and words.index("partition") + 1 < len(words):
            p = words[words.index("partition") + 1].rstrip(":")
            if {"active", "handed", "dropped", "fenced"} & set(words):
                state[p] = "active" in words
    return {p for p, active in state.items() if active}


def test_a_view_on_a_third_machine_lists_every_job_of_partitions_owned_by_two_engines(
        settings: Settings, client: Client, engines: list[EngineProcess], views: list[ViewProcess],
        tmp_path: Path) -> None:
    a, b = two_owners(settings, engines, tmp_path)
    handles = [client.submit("noop", {}, tenant=f"t{i % 3}") for i in range(24)]
    assert all(h.wait(60).status == "completed" for h in handles)
    third = tmp_path / "state-third"
    start_view(views, settings, third)
    eventually(lambda: caught_up(settings, third))
    page = listed(settings, third)
    assert {r["job_id"] for r in page["rows"]} == {h.job_id for h in handles}
    assert sorted(page["partitions"]) == [0, 1, 2] and page["counts"]["completed"] == 24
    assert len({r["partition"] for r in page["rows"]}) == 3  # both owners' partitions
    third_client = Client(settings.model_copy(update={"state_dir": third}))
    try:
        assert {r.job_id for r in third_client.jobs(limit=100).rows} == {h.job_id for h in handles}
    finally:
        third_client.close()
    for owner in (a, b):  # the owners keep no view, and no question reads their stores
        assert not view_root(owner.state_dir, settings.namespace).exists()
        assert listed(settings, owner.state_dir)["rows"] == []
    one = handles[0].job_id
    shown = cli(settings, third, "status", one, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["status"] == "completed", shown.stderr
    assert cli(settings, third, "view", "rebuild", "--verify").returncode == 0


def test_an_engine_with_default_settings_answers_from_a_view_of_its_own(
        settings: Settings, client: Client, engines: list[EngineProcess], tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    handles = [client.submit("noop", {}, tenant="acme") for _ in range(6)]
    dead = client.submit("fragile", {"fixed_when": str(tmp_path / "never")}, tenant="acme")
    assert all(h.wait(30).status == "completed" for h in handles) and dead.wait(30).status == "dead"
    page = listed(settings, engine.state_dir)  # read your writes: it waits for the view to fold the log's end
    assert {r["job_id"] for r in page["rows"]} == {h.job_id for h in handles} | {dead.job_id}
    dlq = cli(settings, engine.state_dir, "dlq", "list", "--json")
    assert [j["job_id"] for j in json.loads(dlq.stdout)] == [dead.job_id], dlq.stderr
    now = eventually(lambda: caught_up(settings, engine.state_dir))
    assert "epochq view" in now["holder"] and view_root(engine.state_dir, settings.namespace).is_dir()
    assert engine.stop() == 0
    assert "view: process" in engine.logs()
    _no_view_process(engine.state_dir, settings)  # the engine stopped its view before it exited


def _no_view_process(state_dir: Path, settings: Settings) -> bool:
    from projections.lock import holder_of

    assert holder_of(view_root(state_dir, settings.namespace)) is None
    return True


def test_one_view_per_state_directory_a_second_engine_starts_none(
        settings: Settings, client: Client, engines: list[EngineProcess], views: list[ViewProcess],
        tmp_path: Path) -> None:
    shared = tmp_path / "state-beside"  # the directory EngineProcess "beside" runs in
    view = start_view(views, settings, shared)
    eventually(lambda: caught_up(settings, shared))
    second = cli(settings, shared, "view", "run")
    assert second.returncode == 2 and "held by epochq view" in second.stderr and "Traceback" not in second.stderr
    engine = start_engine(engines, settings, "beside", tmp_path)
    engine.wait_active(3)
    assert "not starting another" in engine.logs() and view.proc.poll() is None
    handle = client.submit("noop", {}, tenant="acme")
    assert handle.wait(30).status == "completed"
    assert [r["job_id"] for r in listed(settings, shared)["rows"]] == [handle.job_id]
    assert engine.stop() == 0 and view.proc.poll() is None  # the engine stops only a view it started


def test_view_run_without_topics_says_what_to_do(settings: Settings, tmp_path: Path) -> None:
    missing = settings.model_copy(update={"namespace": settings.namespace + "-none"})
    run = cli(missing, tmp_path / "s", "view", "run")
    assert run.returncode == 2 and "run `epochq topics ensure`" in run.stderr and "Traceback" not in run.stderr


def test_finished_jobs_leave_the_view_after_keep_finished_and_history_reads_the_log(
        settings: Settings, client: Client, engines: list[EngineProcess], views: list[ViewProcess],
        tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--no-view",))
    engine.wait_active(3)
    old = [client.submit("noop", {}, tenant="acme", labels={"team": "red"}) for _ in range(3)]
    dead = client.submit("fragile", {"fixed_when": str(tmp_path / "never")}, tenant="acme")
    ends = [h.wait(30) for h in old] + [dead.wait(30)]
    assert [o.status for o in ends] == ["completed"] * 3 + ["dead"]
    # on purpose: event time must pass --keep-finished (2 s) plus the sweep's step (at least 1 s of event time,
    # projections/retention.py) after the old jobs ended before the fresh ones run; the view sweeps as events arrive
    last_end = max(e.event.occurred_at for o in ends for e in o.events)
    time.sleep(max(0.0, (last_end + 4_000_000) / 1e6 - time.time()))
    fresh = [client.submit("noop", {}, tenant="acme") for _ in range(9)]
    assert all(h.wait(30).status == "completed" for h in fresh)
    here = tmp_path / "state-view"
    start_view(views, settings, here, "--keep-finished", "2s")
    eventually(lambda: caught_up(settings, here))
    ids = {r["job_id"] for r in listed(settings, here)["rows"]}
    assert dead.job_id in ids and not ids & {h.job_id for h in old}
    assert listed(settings, here, "--label", "team=red")["rows"] == []
    history = cli(settings, here, "history", old[0].job_id, "--json")
    assert history.returncode == 0 and "JobSucceeded" in history.stdout, history.stderr
    audit = cli(settings, here, "audit", "--tenant", "acme", "--format", "jsonl")
    assert audit.returncode == 0 and old[0].job_id in audit.stdout, audit.stderr
    verified = cli(settings, here, "view", "rebuild", "--verify", "--keep-finished", "2s")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_sigterm_stops_a_view_cleanly_and_it_goes_on_where_it_ended(
        settings: Settings, client: Client, engines: list[EngineProcess], views: list[ViewProcess],
        tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--no-view",))
    engine.wait_active(3)
    here = tmp_path / "state-view"
    view = start_view(views, settings, here)
    first = [client.submit("noop", {}, tenant="acme") for _ in range(5)]
    assert all(h.wait(30).status == "completed" for h in first)
    eventually(lambda: caught_up(settings, here))
    view.proc.send_signal(signal.SIGTERM)
    assert view.proc.wait(30) == 0 and "Traceback" not in view.logs()
    later = [client.submit("noop", {}, tenant="acme") for _ in range(5)]
    assert all(h.wait(30).status == "completed" for h in later)
    start_view(views, settings, here)
    eventually(lambda: caught_up(settings, here))
    assert len(listed(settings, here)["rows"]) == 10


def test_a_view_picks_up_partitions_added_to_the_topic(
        settings: Settings, client: Client, views: list[ViewProcess], tmp_path: Path) -> None:
    here = tmp_path / "state-view"
    start_view(views, settings, here)
    eventually(lambda: caught_up(settings, here))
    assert len(status(settings, here)["partitions"]) == 3
    admin = AdminClient(settings.kafka_config())
    for future in admin.create_partitions([NewPartitions(settings.events_topic, 4)]).values():
        future.result(30)
    eventually(lambda: _partitions(settings, here, 4), 30)


def _partitions(settings: Settings, state_dir: Path, n: int) -> bool:
    now = caught_up(settings, state_dir)
    assert len(now["partitions"]) == n and (view_root(state_dir, settings.namespace) / "p0003").is_dir(), now
    return True


def test_a_console_starts_a_view_where_none_runs_and_stops_it_with_itself(
        settings: Settings, client: Client, engines: list[EngineProcess], tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--no-view",))
    engine.wait_active(3)
    handle = client.submit("noop", {}, tenant="acme")
    assert handle.wait(30).status == "completed"
    port = free_port()
    here = tmp_path / "state-console"
    log = open(tmp_path / "console.log", "w")
    console = subprocess.Popen([sys.executable, "-m", "engine.cli.main", "console", "--port", str(port),
                                "--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace,
                                "--state-dir", str(here)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        eventually(lambda: caught_up(settings, here), 90)  # the console starts its view first: slow when busy
        eventually(lambda: _shows(f"http://127.0.0.1:{port}/jobs", handle.job_id))
        eventually(lambda: _shows(f"http://127.0.0.1:{port}/overview/live", "view: 0 record(s) behind the log"))
    finally:
        console.terminate()
        console.wait(30)
        log.close()
    eventually(lambda: _no_view_process(here, settings), 10)  # its view stops with it (it watches its parent)


def _shows(url: str, text: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    except urllib.error.URLError as e:  # not listening yet
        raise AssertionError(str(e)) from e
    assert text in body
    return True
