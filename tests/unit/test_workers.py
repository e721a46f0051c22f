"""The engines' heartbeats: what one says, the newest per instance, and when an instance counts as lost."""

from __future__ import annotations

from engine.runtime.read.workers import LaneSlots, PartitionRow, WorkerRow, decode_heartbeat, encode_heartbeat, latest
from engine.cli.catalog import parse_labels, worker_json

import pytest

from engine.errors import ValidationError

S = 1_000_000


def row(instance: str, seen_s: float, running: tuple[str, ...] = ()) -> WorkerRow:
    return WorkerRow(instance, "host", 42, 0, int(seen_s * S), [PartitionRow(1, 3, "active", instance)],
                     [LaneSlots("NORMAL", 2, 98)], list(running), 5.0)


def test_a_heartbeat_reads_back_as_it_was_written() -> None:
    written = row("a", 10, ("job-1", "job-2"))
    assert decode_heartbeat(encode_heartbeat(written), 10 * S) == written


def test_the_newest_record_per_instance_counts_and_a_tombstone_removes_it() -> None:
    records = [(b"a", encode_heartbeat(row("a", 1))), (b"b", encode_heartbeat(row("b", 2))),
               (b"a", encode_heartbeat(row("a", 9, ("job-9",)))), (b"b", None), (None, b"x"), (b"c", b"garbage")]
    rows = latest(records, 10 * S)
    assert [(r.instance, r.running) for r in rows] == [("a", ["job-9"])]


def test_an_instance_silent_for_three_intervals_is_lost_and_listed_last() -> None:
    records = [(b"old", encode_heartbeat(row("old", 0))), (b"new", encode_heartbeat(row("new", 14)))]
    rows = latest(records, 15.5 * S)
    assert [(r.instance, r.lost) for r in rows] == [("new", False), ("old", True)]
    assert worker_json(rows[1])["lost"] is True and worker_json(rows[0])["slots"] == [
        {"lane": "NORMAL", "used": 2, "free": 98}]


def test_label_flags_are_pairs_and_a_flag_without_equals_is_refused() -> None:
    assert parse_labels(["team=red", "env=prod", "note=a=b"]) == (("env", "prod"), ("note", "a=b"), ("team", "red"))
    with pytest.raises(ValidationError):
        parse_labels(["team"])
