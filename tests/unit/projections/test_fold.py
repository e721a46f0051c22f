"""The fold into a real RocksDB store: offsets, fencing, and the laws of event sourcing."""

from __future__ import annotations

from pathlib import Path
import tempfile

from hypothesis import given, settings, strategies as st

from engine.contract import messages as m
from engine.domain.decide import (
    DecideContext,
)
from projections.batch import Batch
from projections.evolve import FENCED, POISON, fold, fold_guarded, fold_state, record_position
from projections.store import ProjectionStore, open_store, rocksdb_memory
from projections.views import keys as k
from projections.views.jobs import read_job
from tests.unit.factories import claim, event
from tests.unit.histories import STEPS, simulate

CTX = DecideContext(now=1_000)


def folded(events: list[m.Event], path: Path, split: int | None = None) -> dict[bytes, bytes]:
    store = open_store(path)
    for part in ([events] if split is None else [events[:split], events[split:]]):
        batch = Batch(store)
        for ev in part:
            fold(batch, ev, _next(batch))
        batch.commit()
        if split is not None:
            store.close()
            store = open_store(path)
    items = dict(store.items())
    store.close()
    return items


def _next(batch: Batch) -> int:
    return max(batch.last_offset, batch.store.applied_offset()) + 1


@settings(max_examples=40, deadline=None)
@given(STEPS, st.data())
def test_folding_a_prefix_then_the_rest_equals_folding_all(steps, data) -> None:  # type: ignore[no-untyped-def]
    events = simulate(steps)
    split = data.draw(st.integers(0, len(events)))
    with tempfile.TemporaryDirectory() as tmp:
        assert folded(events, Path(tmp) / "a") == folded(events, Path(tmp) / "b", split)


@settings(max_examples=40, deadline=None)
@given(STEPS, st.data())
def test_stale_epoch_events_never_change_state(steps, data) -> None:  # type: ignore[no-untyped-def]
    events = simulate(steps, epoch=1)
    events.insert(len(events), claim(2, "owner-b"))
    zombie = simulate(data.draw(STEPS), epoch=1)[1:]
    with tempfile.TemporaryDirectory() as tmp:
        clean = folded(events, Path(tmp) / "a")
        dirty = folded(events + zombie, Path(tmp) / "b")
    # history, the tenant index and the counts of records set aside say what is in the log, fenced ones too: not state
    log_index = (k.HISTORY, k.TENANT_JOBS, k.ASIDE, b"m:offset")
    state = lambda items: {key: v for key, v in items.items() if not key.startswith(log_index)}  # noqa: E731
    assert state(clean) == state(dirty)
    fenced = [v for key, v in dirty.items() if key.startswith(k.HISTORY) and v == FENCED.encode()]
    assert len(fenced) == sum(1 for e in zombie if e.job_id)
    assert int(dirty.get(k.ASIDE + b"fenced", b"0")) == len(zombie)  # each one counted


def test_offset_is_written_with_the_state(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    batch = Batch(store)
    fold(batch, claim(1), 0)
    fold(batch, event(m.JobSubmitted("t", m.Payload(b"{}"), 5, "NORMAL", 3)), 1)
    assert store.applied_offset() == -1
    batch.commit()
    assert store.applied_offset() == 1 and read_job(store, "job-1") is not None


def test_store_with_data_but_no_offset_is_rebuilt(tmp_path: Path) -> None:
    raw = ProjectionStore(tmp_path / "s")
    raw._db.put(b"j:orphan", b"{}")
    raw.close()
    store = open_store(tmp_path / "s")
    assert store.applied_offset() == -1 and store.get(b"j:orphan") is None


def test_rocksdb_memory_counts_the_memtables_within_the_shared_cache_and_nothing_once_closed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    before = rocksdb_memory([store])
    for n in range(2000):
        store.commit({f"j:job-{n}".encode(): b"x" * 500}, n)
    grown = rocksdb_memory([store])
    assert grown["memtables"] >= 1_000_000 > before["memtables"]  # 2,000 x 500 bytes, not flushed yet
    assert grown["block_cache"] >= grown["memtables"]  # charged to the cache: its usage is the bounded total
    store.close()
    assert store.memory() == {"memtables": 0, "table_readers": 0}


def test_indexes_follow_the_job(tmp_path: Path) -> None:
    events = simulate([(1, 0), (1, 1), (1, 2)])
    store = open_store(tmp_path / "s")
    batch = Batch(store)
    for offset, ev in enumerate(events):
        fold(batch, ev, offset)
    batch.commit()
    job = read_job(store, "job-1")
    assert job is not None and job.state.value == "running"
    assert list(store.scan(k.RUNNING)) == [(k.running_key("job-1"), b"1")]
    assert list(store.scan(k.READY)) == [] and list(store.scan(k.DUE)) == []


def test_a_breaker_cool_down_sits_in_the_due_index_while_open(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p")
    batch = Batch(store)
    fold(batch, claim(1), 0)
    fold(batch, event(m.BreakerOpened("pay", 3, 5_000_000, "3 failures"), None, tenant=None), 1)
    assert dict(batch.scan(k.BREAKER_DUE)) == {k.breaker_due_key(5_000_000, "pay"): b"pay"}
    fold(batch, event(m.BreakerHalfOpened("pay", "", "cool-down ended"), None, tenant=None), 2)
    assert dict(batch.scan(k.BREAKER_DUE)) == {}
    fold(batch, event(m.BreakerOpened("pay", 1, 9_000_000, "probe failed"), None, tenant=None), 3)
    fold(batch, event(m.BreakerOpened("pay", 1, 12_000_000, "probe failed"), None, tenant=None), 4)
    assert dict(batch.scan(k.BREAKER_DUE)) == {k.breaker_due_key(12_000_000, "pay"): b"pay"}
    fold(batch, event(m.BreakerClosed("pay", "probe succeeded"), None, tenant=None), 5)
    assert dict(batch.scan(k.BREAKER_DUE)) == {}
    store.close()


@settings(max_examples=30, deadline=None)
@given(STEPS)
def test_folding_state_when_deciding_then_positions_at_commit_equals_folding_the_log(steps) -> None:  # type: ignore[no-untyped-def]
    """The owner folds its events' state as it decides and their positions once committed: same bytes."""
    events = simulate(steps)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "owner")
        batch = Batch(store)
        verdicts = [fold_state(batch, ev).status for ev in events]
        for offset, (ev, verdict) in enumerate(zip(events, verdicts)):
            record_position(batch, ev, verdict, offset)
        batch.commit()
        owner = dict(store.items())
        store.close()
        assert owner == folded(events, Path(tmp) / "log")


def test_a_rollback_undoes_every_change_since_the_savepoint(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    seen: list[tuple[bytes, bytes | None]] = []
    batch = Batch(store, lambda key, value: seen.append((key, value)), (k.READY,))
    for offset, ev in enumerate(simulate([(1, 0)])):
        fold(batch, ev, offset)
    before_changes, before_jobs = dict(batch.changes), dict(batch.jobs)
    batch.savepoint()
    fold_state(batch, event(m.JobStarted(1, 1_000), "job-1"))
    fold_state(batch, event(m.JobSubmitted("t", m.Payload(b"{}"), 5, "NORMAL", 3), "job-2"))
    batch.rollback()
    assert batch.changes == before_changes and batch.jobs == before_jobs
    ready = [key for key, _ in seen if key.startswith(k.READY)]
    assert seen[-1] == (ready[0], b"job-1")  # the ready view was told the entry is back
    store.close()


def test_an_event_whose_fold_raises_is_set_aside_with_its_position(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import projections.evolve as fold_module

    store = open_store(tmp_path / "s")
    batch = Batch(store)
    fold(batch, claim(1), 0)
    real = fold_module.track_depths
    monkeypatch.setattr(fold_module, "track_depths", lambda *a: (_ for _ in ()).throw(ValueError("poison")))
    bad = fold_guarded(batch, event(m.JobSubmitted("t", m.Payload(b"{}"), 5, "NORMAL", 3), "job-1"), 1)
    monkeypatch.setattr(fold_module, "track_depths", real)
    assert bad.status == POISON and read_job(batch, "job-1") is None
    assert batch.get(k.history_key("job-1", 1)) == POISON.encode() and batch.last_offset == 1
    store.close()
