"""The catalog's indexes and counters (folded) and its pages (read), on real RocksDB stores, no broker."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.errors import ValidationError
from projections.batch import Batch
from engine.questions.jobs import JobFilter, job_detail, list_jobs
from projections.evolve import fold
from projections.store import LISTING_INDEXED, open_store, view_store_path
from projections.views import keys as k
from projections.views.listing import catalog_changes, counter_key, listing_keys
from tests.unit.factories import claim, event
from tests.unit.histories import STEPS, expected_catalog, lifecycle, simulate

CATALOG = (k.LIST_STATUS, k.LIST_TENANT, k.LIST_TYPE, k.LIST_TENANT_TYPE)
COUNTERS = (k.COUNT_STATUS, k.COUNT_TENANT, k.COUNT_TYPE, k.COUNT_TENANT_TYPE)


def fold_in_batches(events: list[m.Event], path: Path, every: int) -> dict[bytes, bytes]:
    """Fold ``events`` committing every ``every`` events; the store's items."""
    store = open_store(path)
    batch = Batch(store)
    for offset, ev in enumerate(events):
        fold(batch, ev, offset)
        if (offset + 1) % every == 0:
            batch.commit()
    batch.commit()
    items = dict(store.items())
    store.close()
    return items


@settings(max_examples=40, deadline=None)
@given(STEPS, st.integers(1, 7))
def test_the_catalog_indexes_and_counters_are_what_the_records_imply(steps, every) -> None:  # type: ignore[no-untyped-def]
    events = simulate(steps)
    with tempfile.TemporaryDirectory() as tmp:
        items = fold_in_batches(events, Path(tmp) / "s", every)
    catalog = {key: v for key, v in items.items() if key.startswith(CATALOG + COUNTERS)}
    assert catalog == expected_catalog(items)


def staged_catalog(batch: Batch) -> tuple[dict[bytes, bytes | None], dict[bytes, int]]:
    """What the batch's commit will write to the catalog: key changes and counter deltas."""
    changes: dict[bytes, bytes | None] = {}
    counts: dict[bytes, int] = {}
    catalog_changes(batch.jobs, batch.listed, changes, counts)
    return changes, counts


def test_a_job_that_passes_through_statuses_within_one_batch_moves_its_entries_once(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    batch = Batch(store)
    for offset, ev in enumerate([claim(1), *lifecycle("job-1", "acme", "email", 10)]):
        fold(batch, ev, offset)
    changes, counts = staged_catalog(batch)
    assert set(changes) == set(listing_keys(batch.jobs["job-1"])) and set(changes.values()) == {b""}
    assert all(b"completed\x1f" in key for key in changes)  # no tombstone of queued or running
    assert counts == {counter_key("acme", "email", "completed"): 1}
    batch.commit()
    for offset, ev in enumerate(lifecycle("job-2", "acme", "email", 20, end="running"), start=10):
        fold(batch, ev, offset)
    batch.commit()
    fold(batch, event(m.JobSucceeded(1, 5), "job-2", at=30), 20)  # committed running entries: deleted
    changes, counts = staged_catalog(batch)
    deleted = {key for key, v in changes.items() if v is None}
    assert len(deleted) == 1 and all(b"running\x1f" in key for key in deleted)  # running: status index only
    assert len(changes) == 5 and counts == {counter_key("acme", "email", "running"): -1,
                                            counter_key("acme", "email", "completed"): 1}
    store.close()


ENDS = ("completed", "queued", "running", "dead", "cancelled", "scheduled")


def two_partitions(tmp_path: Path, jobs: int = 60) -> Settings:
    """A state directory with two partitions' stores holding ``jobs`` jobs of 3 tenants and 2 task types."""
    settings = load_settings(state_dir=str(tmp_path), bootstrap="127.0.0.1:1")
    for p in (0, 1):
        events = [claim(1)]
        for n in range(p, jobs, 2):
            events += lifecycle(f"job-{n:03d}", f"t{n % 3}", f"type{n % 2 if n % 5 else 2}", 1_000_000 + n * 10,
                                end=ENDS[n % len(ENDS)], labels={"team": "red" if n % 4 == 0 else "blue"})
        fold_in_batches(events, view_store_path(tmp_path, settings.namespace, p), 5)
    return settings


def walk(settings: Settings, flt: JobFilter, limit: int) -> list[str]:
    """Every job of every page of ``flt``, following the cursors."""
    out, cursor = [], None
    while True:
        page = list_jobs(settings, flt, cursor=cursor, limit=limit)
        out += [r.job_id for r in page.rows]
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def expected(jobs: int, keep) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"job-{n:03d}" for n in reversed(range(jobs)) if keep(n)]


@pytest.mark.parametrize("limit", [1, 7, 100])
def test_pages_walk_every_job_once_newest_first_across_partitions(tmp_path: Path, limit: int) -> None:
    settings = two_partitions(tmp_path)
    assert walk(settings, JobFilter(), limit) == expected(60, lambda n: True)


def test_filters_by_status_tenant_type_and_time_pick_the_right_jobs(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path)
    typ = lambda n: f"type{n % 2 if n % 5 else 2}"  # noqa: E731
    assert walk(settings, JobFilter(status="dead"), 4) == expected(60, lambda n: ENDS[n % 6] == "dead")
    assert walk(settings, JobFilter(tenant="t1"), 4) == expected(60, lambda n: n % 3 == 1)
    assert walk(settings, JobFilter(task_type="type2"), 3) == expected(60, lambda n: typ(n) == "type2")
    assert walk(settings, JobFilter(status="queued", tenant="t0", task_type="type1"), 2) == \
        expected(60, lambda n: ENDS[n % 6] == "queued" and n % 3 == 0 and typ(n) == "type1")
    window = JobFilter(since_us=1_000_000 + 100, until_us=1_000_000 + 300)  # jobs 10..29
    assert walk(settings, window, 6) == expected(60, lambda n: 10 <= n < 30)


def test_counts_per_status_come_with_the_filter_without_its_status(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path)
    page = list_jobs(settings, JobFilter(status="running", tenant="t2"))
    want = Counter(ENDS[n % 6] for n in range(60) if n % 3 == 2)
    assert page.counts == {s: want.get(s, 0) for s in page.counts} and page.counts_exact
    assert {r.status for r in page.rows} == {"running"} and len(page.rows) == want["running"]
    timed = list_jobs(settings, JobFilter(since_us=1_000_000 + 300))
    assert sum(timed.counts.values()) == 30 and timed.counts_exact
    late_t2 = list_jobs(settings, JobFilter(status="running", tenant="t2", since_us=1_000_000 + 300))
    want = Counter(ENDS[n % 6] for n in range(30, 60) if n % 3 == 2)
    assert late_t2.counts == {s: want.get(s, 0) for s in late_t2.counts} and len(late_t2.rows) == want["running"]


def test_labels_filter_through_the_label_index(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path)
    red = lambda n: n % 4 == 0  # noqa: E731
    assert walk(settings, JobFilter(labels=(("team", "red"),)), 4) == expected(60, red)
    assert walk(settings, JobFilter(status="completed", labels=(("team", "red"),)), 4) == \
        expected(60, lambda n: red(n) and ENDS[n % 6] == "completed")
    page = list_jobs(settings, JobFilter(labels=(("team", "blue"),)))
    assert sum(page.counts.values()) == 45
    assert list_jobs(settings, JobFilter(labels=(("team", "green"),))).rows == []


def test_rows_carry_what_the_record_says(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path, jobs=6)
    rows = {r.job_id: r for r in list_jobs(settings, JobFilter()).rows}
    dead = rows["job-003"]
    assert (dead.status, dead.tenant, dead.partition, dead.error, dead.attempts) == ("dead", "t0", 1, "E: boom", 1)
    assert rows["job-005"].due_at_us == 1_000_050 + 1_000_000 and rows["job-005"].status == "scheduled"


def test_bad_cursors_statuses_and_limits_are_refused(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path, jobs=4)
    with pytest.raises(ValidationError):
        list_jobs(settings, JobFilter(), cursor="not a cursor!")
    with pytest.raises(ValidationError):
        JobFilter(status="sleeping")
    with pytest.raises(ValidationError):
        list_jobs(settings, JobFilter(), limit=0)


def test_a_reader_kept_open_sees_later_commits_and_a_replaced_store(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path, jobs=4)
    assert len(list_jobs(settings, JobFilter()).rows) == 4
    path = view_store_path(tmp_path, settings.namespace, 0)
    store = open_store(path)  # the writer goes on while the reader stays open
    batch = Batch(store)
    for offset, ev in enumerate(lifecycle("job-100", "t9", "type9", 5_000_000, end="running"),
                                start=store.applied_offset() + 1):
        fold(batch, ev, offset)
    batch.commit()
    page = list_jobs(settings, JobFilter())
    assert page.rows[0].job_id == "job-100" and page.counts["running"] == 2
    detail = job_detail(settings, "job-100")
    assert detail is not None and detail.row.status == "running" and len(detail.history) == 3
    assert detail.history == sorted(detail.history) and detail.applied_offset == detail.history[-1][0]
    store.wipe()  # a rebuild replaces the store: the reader opens the new one
    fold_in_batches([claim(1), *lifecycle("job-200", "t9", "type9", 6_000_000)], path, 3)
    assert [r.job_id for r in list_jobs(settings, JobFilter(tenant="t9")).rows] == ["job-200"]
    assert job_detail(settings, "job-100") is None and job_detail(settings, "job-001", partition=1) is not None


def test_a_store_made_before_the_catalog_is_listed_record_by_record(tmp_path: Path) -> None:
    settings = two_partitions(tmp_path, jobs=20)
    path = view_store_path(tmp_path, settings.namespace, 1)
    store = open_store(path)
    old = {key: None for key, _ in store.items() if key.startswith(CATALOG + COUNTERS) or key == LISTING_INDEXED}
    store.commit(old, store.applied_offset())  # as a store folded before the catalog existed
    store.close()
    page = list_jobs(settings, JobFilter(status="completed"), limit=3)
    assert page.unindexed == [1] and [r.job_id for r in page.rows] == ["job-018", "job-012", "job-006"]
    assert walk(settings, JobFilter(tenant="t1"), 4) == expected(20, lambda n: n % 3 == 1)
    assert sum(page.counts.values()) == 20
