"""``epochq simulate`` on a namespace a real engine worked: the recorded jobs replayed under other settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import start_engine


def simulate(settings: Settings, *flags: str) -> dict:  # type: ignore[type-arg]
    cmd = [sys.executable, "-m", "engine.cli.main", "simulate", "--json", "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace, *flags]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout)


def test_simulate_replays_a_recorded_backlog_under_other_weights(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--slots", "NORMAL=2"))
    engine.wait_active(3)
    jobs = [{"task_type": "slow", "payload": {"seconds": 0.05}, "tenant": tenant} for tenant in ("acme", "zeta")
            for _ in range(8)]
    assert {o.status for o in client.wait_all(client.submit_many(jobs), 60)} == {"completed"}

    same = simulate(settings, "--slots", "NORMAL=2")
    assert same["jobs"] == 16 and same["unstarted"] == 0 and same["jobs_per_second"] > 0
    rows = {row["tenant"]: row for row in same["rows"]}
    assert set(rows) == {"acme", "zeta"} and all(row["jobs"] == 8 for row in rows.values())
    assert all(row["recorded"]["p50_ms"] is not None for row in rows.values())
    assert abs(sum(row["simulated"]["share"] for row in rows.values()) - 1.0) < 1e-6

    tilted = {row["tenant"]: row for row in simulate(settings, "--slots", "NORMAL=2", "--weight", "acme=5")["rows"]}
    assert tilted["acme"]["simulated"]["p50_ms"] <= rows["acme"]["simulated"]["p50_ms"]
    assert tilted["zeta"]["simulated"]["p50_ms"] >= rows["zeta"]["simulated"]["p50_ms"]
    wide = {row["tenant"]: row for row in simulate(settings, "--slots", "NORMAL=16")["rows"]}
    assert all(row["simulated"]["p99_ms"] == 0 for row in wide.values())  # a slot for every job: nobody waits


def test_simulated_failures_are_summed_up_not_logged_one_line_each(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    never = str(tmp_path / "never")
    handles = client.submit_many([{"task_type": "flaky", "payload": {"fixed_when": never}, "tenant": "acme"}
                                  for _ in range(5)])
    assert {o.status for o in client.wait_all(handles, 60)} == {"dead"}

    cmd = [sys.executable, "-m", "engine.cli.main", "simulate", "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace, "--app", "tests.integration.apps:app"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert [line for line in lines if line.startswith("simulated failures:")] == [
        "simulated failures: flaky: 20 attempt(s) failed (ConnectionError 20), 5 job(s) dead-lettered"], lines
    assert len(lines) == 2, lines  # the summary and the replay's speed: no line per attempt
    summed = simulate(settings, "--app", "tests.integration.apps:app")
    assert summed["failures"] == [{"task_type": "flaky", "error": "ConnectionError", "attempts": 20}]
    assert summed["dead_lettered"] == {"flaky": 5}
