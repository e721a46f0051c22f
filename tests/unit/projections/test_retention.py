"""The view's retention, on real RocksDB stores (no broker): what leaves, what stays, and the same bytes however
the fold is cut into commits."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings, strategies as st

from engine.contract import messages as m
from projections.batch import Batch
from projections.evolve import fold_guarded
from projections.retention import PRUNED, Retention
from projections.store import open_store
from projections.views import keys as k
from tests.unit.factories import claim
from tests.unit.histories import expected_catalog, lifecycle

S = 1_000_000
KEEP = 10 * S
CATALOG = (k.LIST_STATUS, k.LIST_TENANT, k.LIST_TYPE, k.LIST_TENANT_TYPE, k.COUNT_STATUS, k.COUNT_TENANT,
           k.COUNT_TYPE, k.COUNT_TENANT_TYPE)


def fold_view(events: list[m.Event], path: Path, every: int, keep_us: int = KEEP) -> dict[bytes, bytes]:
    """Fold ``events`` with retention, committing every ``every`` events; the store's items."""
    store = open_store(path)
    batch, retention = Batch(store), Retention(keep_us)
    for offset, ev in enumerate(events):
        retention.after(batch, ev, fold_guarded(batch, ev, offset))
        if (offset + 1) % every == 0:
            batch.commit()
    batch.commit()
    items = dict(store.items())
    store.close()
    return items


def stream(ends: list[str], gap_us: int = 3 * S) -> list[m.Event]:
    """One job per entry of ``ends`` (how it ends), each ``gap_us`` after the one before, labelled by parity."""
    out = [claim(1)]
    for n, end in enumerate(ends):
        out += lifecycle(f"job-{n}", f"t{n % 2}", "email", S + n * gap_us, end=end, labels={"n": str(n % 2)})
    return out


def keys_of(items: dict[bytes, bytes], job_id: str) -> list[bytes]:
    return [key for key in items if job_id.encode() in key]


def test_a_finished_job_leaves_every_index_once_later_events_pass_keep(tmp_path: Path) -> None:
    items = fold_view(stream(["completed", "cancelled", "dead", "queued", "running", *["completed"] * 5]),
                      tmp_path / "s", every=4)
    for gone in ("job-0", "job-1"):  # finished 27 s before the last event; 10 s are kept
        assert keys_of(items, gone) == [], keys_of(items, gone)
    for kept in ("job-2", "job-3", "job-4", "job-9"):  # dead, queued, running; finished within keep
        assert items.get(k.job_key(kept)) is not None
    assert k.dead_key(S + 6 * S + 4, "job-2") in items and PRUNED in items
    assert {key: v for key, v in items.items() if key.startswith(CATALOG)} == expected_catalog(items)


def test_keep_zero_keeps_everything(tmp_path: Path) -> None:
    events = stream(["completed"] * 6)
    kept = fold_view(events, tmp_path / "a", every=3, keep_us=0)
    assert all(kept.get(k.job_key(f"job-{n}")) is not None for n in range(6)) and PRUNED not in kept


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["completed", "cancelled", "dead", "queued", "running"]), max_size=25),
       st.integers(1, 9), st.integers(1, 5))
def test_a_rebuild_reaches_the_same_bytes_whatever_the_commit_points(ends, every, gap_s) -> None:  # type: ignore[no-untyped-def]
    events = stream(ends, gap_s * S)
    with tempfile.TemporaryDirectory() as tmp:
        whole = fold_view(events, Path(tmp) / "whole", every=len(events))
        cut = fold_view(events, Path(tmp) / "cut", every=every)
    assert cut == whole
    assert {key: v for key, v in whole.items() if key.startswith(CATALOG)} == expected_catalog(whole)


def test_a_sparse_history_sweeps_once_a_minute_of_event_time_not_at_every_event(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import projections.retention as retention_module
    sweeps: list[int] = []
    real = retention_module.sweep
    monkeypatch.setattr(retention_module, "sweep", lambda batch, cutoff, staged=None:
                        sweeps.append(cutoff) or real(batch, cutoff, staged))
    events = stream(["completed"] * 30, gap_us=5 * S)  # a job every 5 s: every event in a new second
    fold_view(events, tmp_path / "s", every=1000, keep_us=30 * 86_400 * S)
    assert 1 <= len(sweeps) <= 3, len(sweeps)  # 150 s of event time, a sweep a minute (each one reads the batch)


def rejected(n: int, at: int) -> m.Event:
    body = m.JobRejected("sms.sen", "unknown_task_type", "no handler")
    return m.Event(f"r-{n}", f"rej-{n}", "acme", 1, "o", at, body)


def test_a_rejected_submit_is_kept_by_the_view_and_leaves_after_keep_whatever_the_commit_points(
        tmp_path: Path) -> None:
    from projections.views.rejected import REJECTED, rejected_key, rejections

    events = stream(["completed"] * 8)
    events[3:3] = [rejected(0, S + 2 * S)]  # 25 s before the last event: it leaves
    events[-2:-2] = [rejected(1, S + 20 * S)]  # within keep: it stays
    whole = fold_view(events, tmp_path / "whole", every=len(events))
    assert [key for key in whole if key.startswith(REJECTED)] == [rejected_key(S + 20 * S, "rej-1")]
    (kept,) = rejections(iter((key, v) for key, v in whole.items() if key.startswith(REJECTED)))
    assert (kept.job_id, kept.tenant, kept.task_type, kept.reason) == ("rej-1", "acme", "sms.sen", "unknown_task_type")
    for every in (1, 2, 3, 5):
        assert fold_view(events, tmp_path / f"cut{every}", every=every) == whole, every
