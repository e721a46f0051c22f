"""The view's pure parts: its retention flag, its lag, the console's line about it, and where its stores live."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.cli.view import keep_finished
from engine.console.reads import view_lag_line
from engine.questions.view_status import PartitionLag, ViewStatus
from projections.store import store_path, view_store_path


@pytest.mark.parametrize(("text", "seconds"), [("30", 30 * 86_400.0), ("0", 0.0), ("90s", 90.0), ("15m", 900.0),
                                               ("12h", 43_200.0), ("1.5d", 129_600.0)])
def test_keep_finished_reads_days_or_a_duration(text: str, seconds: float) -> None:
    assert keep_finished(text) == seconds


@pytest.mark.parametrize("text", ["", "-1", "3w", "soon", "1e3"])
def test_keep_finished_refuses_anything_else(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        keep_finished(text)


def test_lag_counts_what_the_view_has_not_folded() -> None:
    assert PartitionLag(0, end_offset=20, applied_offset=19, newest_event_us=0).lag == 0
    assert PartitionLag(0, end_offset=20, applied_offset=4, newest_event_us=0).lag == 15
    assert PartitionLag(0, end_offset=0, applied_offset=-1, newest_event_us=0).lag == 0
    assert PartitionLag(0, end_offset=7, applied_offset=-1, newest_event_us=0).lag == 7
    assert PartitionLag(0, 1, 0, newest_event_us=1_000_000).age_s(3_500_000) == 2.5
    assert PartitionLag(0, 1, 0, newest_event_us=0).age_s(3_500_000) is None


def test_the_console_line_says_the_lag_and_the_newest_event_age() -> None:
    rows = [PartitionLag(0, 10, 9, 1_000_000), PartitionLag(1, 10, 6, 2_000_000)]
    assert view_lag_line(ViewStatus("/s/ns/view", "epochq view (pid 1)", rows), 4_000_000) == \
        "view: 3 record(s) behind the log, newest event folded 2.0 s ago"
    assert view_lag_line(ViewStatus("/s/ns/view", None, rows), 4_000_000) == \
        "view: no view process folds /s/ns/view; 3 record(s) behind the log"


def test_the_view_keeps_its_stores_beside_the_owners() -> None:
    assert view_store_path(Path("/s"), "ns", 3) == Path("/s/ns/view/p0003")
    assert store_path(Path("/s"), "ns", 3) == Path("/s/ns/p0003")
