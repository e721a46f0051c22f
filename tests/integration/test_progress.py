"""Progress from a handler on a real broker: recorded as JobProgressed, shown by status and history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.questions.waiting import decided
from tests.integration.conftest import ROOT, start_engine


def test_a_handlers_progress_is_shown_by_status_and_history(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    handle = client.submit("progressing", {}, tenant="acme")
    outcome = handle.wait(30, until=lambda o: o.progress == (0.75, "step 3 of 4"))
    assert outcome.status == "running" and outcome.progress == (0.75, "step 3 of 4"), outcome
    # the reports of one second are coalesced: no more than a few events for 3 reports; the last report is
    # in the log (status read it there), and so is every event before it
    progressed = [e for e in client.status(handle.job_id).events if e.event.type == "JobProgressed"]
    assert 1 <= len(progressed) <= 3 and progressed[-1].event.body.value == 0.75
    cmd = [sys.executable, "-m", "engine.cli.main", "status", handle.job_id, "--bootstrap",
           settings.require_bootstrap(), "--namespace", settings.namespace]
    shown = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "  progress: 0.75 step 3 of 4" in shown.stdout, shown.stdout
    as_json = json.loads(subprocess.run([*cmd, "--json"], cwd=ROOT, capture_output=True, text=True,
                                        timeout=60).stdout)
    assert as_json["progress"] == {"value": 0.75, "message": "step 3 of 4"} and as_json["status"] == "running"
    assert client.cancel(handle.job_id, tenant="acme").wait(15, until=decided).status == "cancelled"
    assert engine.proc.poll() is None
