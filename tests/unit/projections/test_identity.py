"""A store records the log it folds; one folded from another log, or ahead of its log, is wiped when opened."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from projections.checkpoint import CheckpointError, export, load_checked
from projections.identity import log_identity_of, matched, mismatch
from projections.rebuild import compare
from projections.store import LOG_KEY, ProjectionStore, open_store
from tests.unit.projections.test_checkpoint import live_store, manifest_of

OLD = log_identity_of("cluster-a", "topic-1")
NEW = log_identity_of("cluster-a", "topic-2")


def folded(path: Path, identity: str | None, offset: int = 41) -> ProjectionStore:
    """A store holding one job's key at applied ``offset``, bound to ``identity`` (None: made before identities)."""
    store = open_store(path)
    if identity is not None:
        store.bind(identity)
    store.commit({b"j:job-1": b"queued"}, offset)
    return store


def test_a_store_records_the_log_it_was_bound_to_with_its_next_commit(tmp_path: Path) -> None:
    store = folded(tmp_path / "p0000", OLD)
    assert store.log_identity() == OLD and store.get(b"j:job-1") == b"queued"
    store.close()


def test_a_store_of_another_log_is_wiped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = folded(tmp_path / "p0000", OLD)
    with caplog.at_level(logging.WARNING, "epochq.projections"):
        store = matched(store, NEW, end=500, label="partition 0")
    assert store.applied_offset() == -1 and store.get(b"j:job-1") is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("partition 0: store ") and "topic id topic-1" in lines[0] \
        and "topic id topic-2" in lines[0], lines
    store.commit({b"j:job-9": b"queued"}, 0)
    assert store.log_identity() == NEW  # the wiped store records the new log at once
    store.close()


@pytest.mark.parametrize("identity", [OLD, None])
def test_a_store_ahead_of_its_log_is_wiped(tmp_path: Path, identity: str | None) -> None:
    store = folded(tmp_path / "p0000", identity, offset=8403)
    assert mismatch(store, OLD, 0) == "its applied offset 8403 is beyond the log's end (0)"
    assert mismatch(store, OLD, 8403) is not None and mismatch(store, OLD, 8404) is None
    store = matched(store, OLD, 0, "partition 0")
    assert store.applied_offset() == -1 and store.get(b"j:job-1") is None
    store.close()


def test_a_store_of_this_log_is_kept_without_a_word(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = folded(tmp_path / "p0000", OLD)
    with caplog.at_level(logging.WARNING):
        store = matched(store, OLD, 42, "partition 0")
    assert store.applied_offset() == 41 and store.get(b"j:job-1") == b"queued" and not caplog.records
    store.close()


def test_a_store_made_before_identities_were_kept_is_kept_and_learns_its_log(tmp_path: Path) -> None:
    store = folded(tmp_path / "p0000", None)
    assert store.log_identity() is None
    store = matched(store, NEW, 42, "partition 0")
    assert store.get(b"j:job-1") == b"queued"
    store.commit({}, 42)
    assert store.log_identity() == NEW
    store.close()


def test_a_store_wiped_as_corrupt_stays_bound_to_its_log(tmp_path: Path) -> None:
    store = matched(folded(tmp_path / "p0000", OLD), OLD, 42, "partition 0")
    store = store.reset()
    store.commit({}, 0)
    assert store.log_identity() == OLD
    store.close()


def test_a_checkpoint_cut_from_another_log_is_refused(tmp_path: Path) -> None:
    source = live_store(tmp_path)
    source.bind(OLD)
    source.commit({}, 5)
    chunks, keys, offset = export(source)
    source.close()
    manifest = manifest_of(keys, chunks, epoch=2, owner="owner-b", offset=offset)
    same = matched(open_store(tmp_path / "same"), OLD, 10, "partition 0")
    load_checked(same, manifest, chunks)
    assert same.applied_offset() == 5 and same.log_identity() == OLD
    other = matched(open_store(tmp_path / "other"), NEW, 10, "partition 0")
    with pytest.raises(CheckpointError, match="cut from another log"):
        load_checked(other, manifest, chunks)
    assert other.applied_offset() == -1  # refused before its offset was written: a store to wipe
    same.close()
    other.close()


def test_verify_ignores_the_log_a_store_records() -> None:
    live = iter([(b"j:1", b"x"), (LOG_KEY, OLD.encode()), (b"m:offset", b"3")])
    rebuilt = iter([(b"j:1", b"x"), (b"m:offset", b"3")])
    assert compare(0, 3, live, rebuilt).matches
