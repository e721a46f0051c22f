"""The ready view mirrors the store's ready queues and backlogs through any sequence of commits."""

from __future__ import annotations

import random
from pathlib import Path

from projections.batch import Batch
from projections.store import ProjectionStore
from projections.views import keys as k
from projections.views import ready
from projections.views.counters import backlogged
from projections.views.ready import ReadyView

LANE = "normal"


def _queue_in_store(store: ProjectionStore, tenant: str) -> list[tuple[bytes, str]]:
    return [(key, job_id.decode()) for key, job_id in store.scan(k.ready_tenant_prefix(LANE, tenant))]


def _following(store: ProjectionStore, view: ReadyView) -> Batch:
    """A batch that tells the view of every ready or backlog key it stages, as an owner's does."""
    return Batch(store, view.mirror, (k.READY, k.BACKLOG))


def _commit(store: ProjectionStore, view: ReadyView, key: bytes, job_id: str, offset: int) -> None:
    """Commit one ready entry, as the fold does when a job is queued."""
    batch = _following(store, view)
    batch.put(key, job_id.encode())
    batch.last_offset = offset
    batch.commit()


def _queue_in_view(view: ReadyView, tenant: str, limit: int = 10**9) -> list[tuple[bytes, str]]:
    out, i = [], 0
    while i < limit and (entry := view.entry(LANE, tenant, i)) is not None:
        out.append(entry)
        i += 1
    return out


def test_view_follows_random_puts_and_deletes_across_window_refills(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(ready, "WINDOW", 4)  # small windows, so refills and window ends are exercised
    store = ProjectionStore(tmp_path / "p")
    view = ReadyView(store)
    rng = random.Random(7)
    live: dict[str, dict[bytes, str]] = {"a": {}, "b": {}}
    offset = 0
    for step in range(400):
        batch = _following(store, view)
        for _ in range(rng.randint(1, 5)):
            tenant = rng.choice(["a", "b"])
            queue = live[tenant]
            if queue and rng.random() < 0.4:
                key = rng.choice(sorted(queue)) if rng.random() < 0.5 else min(queue)
                batch.delete(key)
                del queue[key]
            else:
                job_id = f"job-{step}-{rng.randint(0, 10**6)}"
                key = k.ready_key(LANE, tenant, rng.randint(0, 9), rng.randint(0, 50), step, job_id)
                batch.put(key, job_id.encode())
                queue[key] = job_id
            count = len(queue)
            counter = k.lane_tenant_key(k.BACKLOG, LANE, tenant)
            batch.put(counter, b"%d" % count) if count else batch.delete(counter)
        batch.last_offset = offset
        offset += 1
        batch.commit()
        for tenant in ("a", "b"):  # dispatch reads only the heads: windows stay partial
            depth = rng.randint(1, 6)
            assert _queue_in_view(view, tenant, depth) == _queue_in_store(store, tenant)[:depth], f"step {step}"
        assert view.backlogged(LANE) == backlogged(store, LANE)
        if step % 100 == 99:
            for tenant in ("a", "b"):
                assert _queue_in_view(view, tenant) == _queue_in_store(store, tenant), f"step {step}"
            view.clear()
    store.close()


def test_an_entry_ahead_of_the_window_head_is_seen_at_once(tmp_path: Path) -> None:
    """A higher-priority job queued after the window was read goes to its front."""
    store = ProjectionStore(tmp_path / "p")
    view = ReadyView(store)
    low = k.ready_key(LANE, "t", 0, 10, 1, "low")
    _commit(store, view, low, "low", 0)
    assert view.entry(LANE, "t", 0) == (low, "low")
    high = k.ready_key(LANE, "t", 9, 20, 2, "high")
    _commit(store, view, high, "high", 1)
    assert view.entry(LANE, "t", 0) == (high, "high")
    assert view.entry(LANE, "t", 1) == (low, "low")
    assert view.entry(LANE, "t", 2) is None
    store.close()


def test_a_pending_entry_is_a_head_until_cleared_and_its_commit_changes_nothing(tmp_path: Path) -> None:
    store = ProjectionStore(tmp_path / "p")
    view = ReadyView(store)
    key = k.ready_key(LANE, "t", 5, 10, 1, "j1")
    batch = _following(store, view)
    batch.put(key, b"j1")  # queued by a decision of this tick: dispatch may start it in the same tick
    assert view.entry(LANE, "t", 0) == (key, "j1")
    batch.clear()
    view.clear()  # the transaction that queued it aborted
    assert view.entry(LANE, "t", 0) is None
    _commit(store, view, key, "j1", 0)
    assert _queue_in_view(view, "t") == [(key, "j1")] == _queue_in_store(store, "t")
    store.close()
