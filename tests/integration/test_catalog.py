"""``epochq jobs list`` and ``epochq workers`` against a real broker and a running engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import eventually, start_engine, verify_partition


def cli(settings: Settings, *args: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    flags = ["--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace]
    if state_dir is not None:
        flags += ["--state-dir", str(state_dir)]
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *args, *flags], capture_output=True, text=True)


def listed(settings: Settings, state_dir: Path, *args: str) -> dict[str, Any]:
    run = cli(settings, "jobs", "list", "--json", *args, state_dir=state_dir)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)  # type: ignore[no-any-return]


GIVE_UP_RUNNING_JOBS_AT_STOP = ("--grace", "1")
"""The 60 s jobs these tests leave running are handed back 1 s into a stop, not 5 (the tests' default)."""


def test_jobs_list_shows_every_status_with_counts_filters_and_pages(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=GIVE_UP_RUNNING_JOBS_AT_STOP)
    engine.wait_active(3)
    done = [client.submit("noop", {}, tenant="acme", labels={"team": "red"}) for _ in range(4)]
    running = [client.submit("slow", {"seconds": 60}, tenant="globex") for _ in range(2)]
    later = [client.submit("echo", {}, tenant="acme", delay=3600) for _ in range(3)]
    dead = client.submit("fragile", {"fixed_when": str(tmp_path / "never")}, tenant="globex")
    client.cancel(later[0].job_id, tenant="acme")
    assert all(h.wait(30).status == "completed" for h in done) and dead.wait(30).status == "dead"
    want = {"completed": 4, "running": 2, "scheduled": 2, "cancelled": 1, "dead": 1, "queued": 0, "retrying": 0,
            "waiting": 0}

    def settled() -> dict[str, Any]:
        page = listed(settings, engine.state_dir)
        assert page["counts"] == want, page["counts"]
        return page

    page = eventually(settled)
    assert page["counts_exact"] and sorted(page["partitions"]) == [0, 1, 2] and page["next_cursor"] is None
    submitted = [r["submitted_us"] for r in page["rows"]]
    assert submitted == sorted(submitted, reverse=True) and len(page["rows"]) == 10
    assert {r["job_id"] for r in listed(settings, engine.state_dir, "--status", "running")["rows"]} == \
        {h.job_id for h in running}
    assert {r["job_id"] for r in listed(settings, engine.state_dir, "--status", "running", "--tenant", "globex",
                                        "--type", "slow")["rows"]} == {h.job_id for h in running}
    assert listed(settings, engine.state_dir, "--status", "running", "--tenant", "acme")["rows"] == []
    globex_dead = listed(settings, engine.state_dir, "--tenant", "globex", "--type", "fragile", "--status", "dead")
    assert [r["job_id"] for r in globex_dead["rows"]] == [dead.job_id] and globex_dead["rows"][0]["error"]
    assert globex_dead["counts"]["dead"] == 1 and globex_dead["counts"]["completed"] == 0
    red = listed(settings, engine.state_dir, "--label", "team=red")
    assert {r["job_id"] for r in red["rows"]} == {h.job_id for h in done}

    seen, cursor = [], None  # three pages of 4, 4 and 2
    while True:
        more = ("--cursor", cursor) if cursor else ()
        step = listed(settings, engine.state_dir, "--limit", "4", *more)
        seen += [r["job_id"] for r in step["rows"]]
        cursor = step["next_cursor"]
        if cursor is None:
            break
    assert seen == [r["job_id"] for r in page["rows"]]

    text = cli(settings, "jobs", "list", "--status", "scheduled", state_dir=engine.state_dir)
    assert text.returncode == 0 and "scheduled 2" in text.stdout and "next-cursor: none" in text.stdout
    assert "from the view in" in text.stderr
    assert Client(settings.model_copy(update={"state_dir": engine.state_dir})).jobs(status="cancelled") \
        .rows[0].job_id == later[0].job_id
    for p in range(3):
        assert verify_partition(engine.settings(settings), p).matches  # the indexes rebuild identically


def test_workers_shows_the_engine_its_partitions_slots_and_running_jobs_then_forgets_it_at_a_clean_stop(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=GIVE_UP_RUNNING_JOBS_AT_STOP)
    engine.wait_active(3)
    running = client.submit("slow", {"seconds": 60}, tenant="acme")

    def beating() -> dict[str, Any]:
        run = cli(settings, "workers", "--json")
        assert run.returncode == 0, run.stderr
        rows = json.loads(run.stdout)
        assert [r["instance"] for r in rows] == ["solo"]
        assert sorted((p["partition"], p["phase"]) for p in rows[0]["partitions"]) == \
            [(0, "active"), (1, "active"), (2, "active")]
        assert running.job_id in rows[0]["running"]
        return rows[0]  # type: ignore[no-any-return]

    row = eventually(beating, 30)
    assert not row["lost"] and all(p["epoch"] >= 1 for p in row["partitions"])
    normal = next(s for s in row["slots"] if s["lane"] == "NORMAL")
    assert normal["used"] >= 1 and normal["free"] >= 0
    text = cli(settings, "workers")
    assert text.returncode == 0 and "solo" in text.stdout and "partition   0" in text.stdout
    assert [w.instance for w in client.workers()] == ["solo"]

    engine.stop()
    eventually(lambda: _none_left(settings), 30)


def _none_left(settings: Settings) -> bool:
    run = cli(settings, "workers", "--json")
    rows = json.loads(run.stdout)
    assert rows == [], rows
    return True
