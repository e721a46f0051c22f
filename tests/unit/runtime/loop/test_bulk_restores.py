"""BulkRestores: which partitions go to a restore process, and that a forgotten one's process is killed."""

from __future__ import annotations

from pathlib import Path

from engine.config import load_settings
from engine.runtime.loop.bulk import BulkRestores, applied_offset_at


def test_a_short_lag_stays_in_the_loop_and_is_not_tried_again(tmp_path: Path) -> None:
    bulk = BulkRestores(load_settings(bootstrap="127.0.0.1:1", namespace="t", state_dir=str(tmp_path)), 1000)
    assert bulk.may_begin(0)
    assert not bulk.begin(0, 999, 999)
    assert not bulk.may_begin(0) and not bulk.busy(0)


def test_a_forgotten_partition_has_its_process_killed_and_may_begin_again(tmp_path: Path) -> None:
    # nothing answers at this address: the process would wait for the broker until killed
    bulk = BulkRestores(load_settings(bootstrap="127.0.0.1:1", namespace="t", state_dir=str(tmp_path)), 10,
                        processes=1)
    assert bulk.begin(0, 10, 10)
    assert bulk.busy(0) and not bulk.may_begin(1)  # the one process slot is taken
    process = bulk._running[0][0]
    bulk.forget(0)
    assert not process.is_alive() and not bulk.busy(0)
    assert bulk.may_begin(0) and bulk.may_begin(1)


def test_applied_offset_of_a_missing_store_is_minus_one(tmp_path: Path) -> None:
    assert applied_offset_at(tmp_path / "nothing") == -1
