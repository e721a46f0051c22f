"""ctx.fencing_token: a sink that keeps the highest token rejects a SIGSTOPped zombie's late write (real broker)."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.runtime.execution.context import fencing_token
from tests.integration.conftest import start_engine

APP = "tests.integration.effects_app:app"


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_zombie_s_late_write_is_rejected_by_a_sink_that_checks_the_token(
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "sink.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE balances (account TEXT PRIMARY KEY, amount INTEGER, token INTEGER)")
    a = start_engine(engines, settings, "a", tmp_path, app=APP)
    a.wait_active(3)
    handle = client.submit("sink", {"db": str(db), "account": "acct-1", "amount": 10, "seconds": 3}, tenant="acme")
    marks = tmp_path / "marks" / "sink.log"
    wait_for(lambda: any(line[-1] == "started" for line in lines(marks)), 30, "a's handler to start")
    a.signal(signal.SIGSTOP)  # a zombie: its handler holds the job, its partition will be taken
    b = start_engine(engines, settings, "b", tmp_path, app=APP)
    b.wait_active(3, timeout=90)
    assert handle.wait(90).status == "completed"
    a.signal(signal.SIGCONT)  # a's handler wakes past its sleep and writes late, with the old token
    wait_for(lambda: sum(line[-1] in ("written", "rejected") for line in lines(marks)) == 2, 30, "a's late write")

    by_epoch = {int(line[2]): line for line in lines(marks) if line[-1] in ("written", "rejected")}
    assert by_epoch[1][-1] == "rejected" and by_epoch[2][-1] == "written", lines(marks)
    zombie_token, winner_token = int(by_epoch[1][3]), int(by_epoch[2][3])
    assert zombie_token == fencing_token(1, int(by_epoch[1][1])) < winner_token == fencing_token(2, int(by_epoch[2][1]))
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT amount, token FROM balances").fetchall() == [(10, winner_token)]
    assert b.stop() == 0
