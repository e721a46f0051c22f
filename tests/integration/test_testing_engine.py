"""TestEngine tells the same story as a real engine on a real broker: the same events, in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.client import Client
from engine.config import Settings
from engine.contract import messages as m
from engine.testing import TestEngine
from tests.integration import apps
from tests.integration.conftest import start_engine


def story(events: list[m.Event]) -> list[tuple[Any, ...]]:
    """What must match: each event's type, attempt, error type and result; not times, offsets, epochs or owner."""
    return [(type(e.body).__name__, getattr(e.body, "attempt", None), getattr(e.body, "error_type", None),
             getattr(e.body, "result", None)) for e in events]


def test_a_job_that_fails_twice_then_succeeds_has_the_same_history_in_testengine_and_on_a_broker(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    real = client.submit("shaky", {"order": 7}, tenant="acme").wait(60)
    assert real.status == "completed" and real.attempts == 3
    assert not any(logged.fenced for logged in real.events)

    with TestEngine(apps.app) as t:
        job = t.submit("shaky", {"order": 7}, tenant="acme")
        t.advance(seconds=5)
        simulated = t.status(job.job_id)
        history = t.history(job.job_id)

    assert (simulated.status, simulated.attempts, simulated.result) == (real.status, real.attempts, real.result)
    assert story(history) == story([logged.event for logged in real.events])
    assert len(history) == 12 and [type(e.body).__name__ for e in history].count("JobRetryScheduled") == 2
