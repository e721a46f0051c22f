"""A job's history read through a projection's index equals a scan of the log."""

from __future__ import annotations

from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.questions.history import job_events, job_history
from tests.integration.conftest import start_engine


def test_history_through_the_index_and_the_tail_equals_a_scan(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "a", tmp_path)
    engine.wait_active(3)
    never = str(tmp_path / "never-fixed")
    handles = client.submit_many([{"task_type": "flaky", "payload": {"fixed_when": never}, "tenant": "acme"}
                                  for _ in range(5)] +
                                 [{"task_type": "noop", "payload": {}, "tenant": "acme"} for _ in range(5)])
    for handle in handles:
        assert handle.wait(timeout=60).done
    indexed = engine.settings(settings)
    with Client(indexed) as local:
        for handle in handles:
            scanned = [(e.offset, e.event.type, e.fenced) for e in job_events(settings, handle.job_id)]
            assert [(e.offset, e.event.type, e.fenced) for e in job_history(indexed, handle.job_id)] == scanned
            assert local.status(handle.job_id).status == client.status(handle.job_id).status

    assert engine.stop() == 0  # a's stores stop here: what b writes next is read from the log after them
    b = start_engine(engines, settings, "b", tmp_path)
    b.wait_active(3)
    late = client.submit("noop", {}, tenant="acme")
    assert late.wait(timeout=60).status == "completed"
    kinds = [(e.event.type, e.fenced) for e in job_history(indexed, late.job_id)]
    assert kinds == [(e.event.type, e.fenced) for e in job_events(settings, late.job_id)]
    assert [kind for kind, _ in kinds][-1] == "JobSucceeded" and not any(fenced for _, fenced in kinds)
