"""Changing a waiting job's priority: the decision, its refusals, the lane it moves to, and the fold (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.contract import messages as m
from engine.domain.decide import CommandInput, DecideContext, TaskPolicy, decide
from engine.domain.jobs import JobView, evolve
from projections.batch import Batch
from projections.evolve import fold
from projections.store import open_store
from projections.views import keys as k
from projections.views.counters import read_int
from tests.unit.factories import claim, command, event, submit

CTX = DecideContext(now=5_000)


def waiting(priority: int = 2, *, run_at: int | None = None, lane: str | None = None) -> tuple[JobView, list[m.Event]]:
    """A job submitted (and queued, or scheduled at ``run_at``) through decide, and its events."""
    job, events = None, []
    for emit in decide(None, CommandInput(submit(priority=priority, run_at=run_at, lane=lane), 0), CTX):
        ev = event(emit.body, at=1_000)  # type: ignore[union-attr]
        job, events = evolve(job, ev), events + [ev]
    assert job is not None
    return job, events


def reprioritize(job: JobView | None, priority: int, ctx: DecideContext = CTX, tenant: str = "acme") -> m.EventBody:
    out = decide(job, CommandInput(command("job-1", m.ReprioritizeJob(priority, "vip", "ops"), tenant), 1), ctx)
    assert len(out) == 1
    return out[0].body  # type: ignore[union-attr]


def test_a_queued_job_follows_its_new_priority_into_its_lane() -> None:
    job, _ = waiting(2)
    assert job.lane == "LOW"
    assert reprioritize(job, 9) == m.JobReprioritized(9, 2, "HIGH", "vip", "ops")
    assert reprioritize(job, 3) == m.JobReprioritized(3, 2, "LOW", "vip", "ops")


@pytest.mark.parametrize(("lane", "pinned"), [("BATCH", None), ("LOW", None), (None, "LOW")])
def test_a_job_pinned_to_a_lane_stays_in_it(lane: str | None, pinned: str | None) -> None:
    job, _ = waiting(9, lane=lane)
    ctx = DecideContext(now=5_000, tasks={"email.send": TaskPolicy(lane=pinned)})
    body = reprioritize(job, 5, ctx)
    assert isinstance(body, m.JobReprioritized) and body.lane == job.lane != "NORMAL"


def test_a_scheduled_job_may_be_reprioritized_too() -> None:
    job, _ = waiting(5, run_at=9_000_000)
    assert job.state.value == "scheduled"
    assert reprioritize(job, 8) == m.JobReprioritized(8, 5, "HIGH", "vip", "ops")


def test_refused_when_unknown_started_or_unchanged() -> None:
    unknown = reprioritize(None, 9)
    assert isinstance(unknown, m.CommandRefused) and unknown.reason == "no job with this id"
    job, _ = waiting(2)
    same = reprioritize(job, 2)
    assert isinstance(same, m.CommandRefused) and "priority is 2 already" in same.reason
    running = evolve(job, event(m.JobStarted(1, 1_000, "w"), at=2_000))
    refused = reprioritize(running, 9)
    assert isinstance(refused, m.CommandRefused) and refused.state == "running"
    bad = reprioritize(job, 10)
    assert isinstance(bad, m.CommandRefused) and "priority" in bad.reason


def test_the_fold_moves_the_ready_entry_and_the_lane_depths(tmp_path: Path) -> None:
    job, events = waiting(2)
    moved = event(reprioritize(job, 9), at=2_000)
    store = open_store(tmp_path / "s")
    batch = Batch(store)
    for offset, ev in enumerate([claim(1), *events, moved]):
        fold(batch, ev, offset)
    batch.commit()
    ready = [key for key, _ in store.scan(k.READY)]
    assert len(ready) == 1 and ready[0].startswith(k.ready_tenant_prefix("HIGH", "acme") + b"0:")
    assert read_int(store, k.lane_key(k.LANE_DEPTH, "HIGH")) == 1
    assert read_int(store, k.lane_key(k.LANE_DEPTH, "LOW")) == 0
    assert read_int(store, k.lane_tenant_key(k.BACKLOG, "HIGH", "acme")) == 1
    store.close()
