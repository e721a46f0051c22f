"""A new owner with an empty state directory restores from a checkpoint of the write model, on a real broker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

from engine.client import Client
from engine.config import Settings
from engine.runtime.topics import checkpoints_topic
from tests.integration.conftest import EngineProcess, eventually, start_engine

JOBS = 300
CUT = re.compile(r"partition (\d+): checkpoint at events offset")
LOADED = re.compile(r"partition (\d+): loaded the checkpoint of epoch \d+ .* restoring from offset (\d+)")


def run_jobs(client: Client, n: int, prefix: str) -> None:
    handles = [client.submit("noop", {"n": i}, tenant="acme", idempotency_key=f"{prefix}-{i}") for i in range(n)]
    outcomes = client.wait_all(handles, timeout=120)
    assert all(o.status == "completed" for o in outcomes)


def first_owner_checkpoints(settings: Settings, client: Client, engines: list[EngineProcess], tmp: Path) -> None:
    """An engine runs JOBS jobs with frequent checkpoints, then hands its partitions back gracefully."""
    first = start_engine(engines, settings, "first", tmp, extra=("--checkpoint-every", "100"))
    first.wait_active(3)
    run_jobs(client, JOBS, "old")
    # each partition checkpoints once it is idle with enough folded; a stop before that would leave one without
    eventually(lambda: {int(p) for p in CUT.findall(first.logs())} == {0, 1, 2}, 60,
               "every partition to checkpoint")
    assert first.stop() == 0


def verify(settings: Settings, state_dir: Path) -> subprocess.CompletedProcess[str]:
    cli = [sys.executable, "-m", "engine.cli.main", "projections", "rebuild", "--all", "--verify", "--bootstrap",
           settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir", str(state_dir)]
    return subprocess.run(cli, capture_output=True, text=True, timeout=180)


def test_an_empty_state_directory_restores_from_the_checkpoint_and_matches_a_replay(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    first_owner_checkpoints(settings, client, engines, tmp_path)
    second = start_engine(engines, settings, "second", tmp_path)
    second.wait_active(3)
    loaded = {int(p): int(offset) for p, offset in LOADED.findall(second.logs())}
    assert sorted(loaded) == [0, 1, 2] and all(offset > 0 for offset in loaded.values()), second.logs()[-3000:]
    assert "checkpoint unusable" not in second.logs()

    again = client.submit("noop", {"n": 7}, tenant="acme", idempotency_key="old-7").wait(30)
    assert again.duplicate  # the tombstone in the checkpoint answers it
    assert client.submit("noop", {}, tenant="acme").wait(30).status == "completed"
    assert second.stop() == 0
    checked = verify(settings, second.state_dir)
    assert checked.returncode == 0 and checked.stdout.count(": match") == 3, checked.stdout + checked.stderr


def test_a_corrupt_checkpoint_falls_back_to_a_replay_with_one_warning(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    first_owner_checkpoints(settings, client, engines, tmp_path)
    producer = Producer({"bootstrap.servers": settings.require_bootstrap()})
    producer.produce(checkpoints_topic(settings), b"{not a manifest", b"manifest", partition=1)
    assert producer.flush(10) == 0

    second = start_engine(engines, settings, "second", tmp_path)
    second.wait_active(3)
    logs = second.logs()
    assert logs.count("checkpoint unusable") == 1 and "partition 1: checkpoint unusable" in logs, logs[-3000:]
    assert sorted(int(p) for p, _ in LOADED.findall(logs)) == [0, 2]
    assert "partition 1: restoring from offset 0" in logs
    assert client.submit("noop", {"n": 3}, tenant="acme", idempotency_key="old-3").wait(30).duplicate
    assert second.stop() == 0
    checked = verify(settings, second.state_dir)
    assert checked.returncode == 0 and checked.stdout.count(": match") == 3, checked.stdout + checked.stderr
