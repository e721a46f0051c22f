"""The engines' heartbeats: what one says, the newest per instance, and when an instance counts as lost."""

from __future__ import annotations

from engine.contract.heartbeat import LaneSlots, PartitionRow, WorkerRow, decode_heartbeat, encode_heartbeat
from engine.questions.workers import latest
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


def test_a_heartbeat_lists_the_task_types_its_engine_handles() -> None:
    from engine.questions.workers import announced_task_types

    written = WorkerRow(**{**row("a", 10).__dict__, "task_types": ["echo", "email.send"]})
    assert decode_heartbeat(encode_heartbeat(written), 10 * S) == written
    old = row("b", 10)  # an engine that predates the list says nothing: nothing can be refused on its account
    assert decode_heartbeat(encode_heartbeat(old), 10 * S).task_types is None  # type: ignore[union-attr]
    assert announced_task_types([written]) == {"echo", "email.send"}
    assert announced_task_types([written, old]) is None
    lost = WorkerRow(**{**written.__dict__, "task_types": ["gone"], "lost": True})
    assert announced_task_types([written, lost]) == {"echo", "email.send"}


def test_an_unannounced_task_type_is_refused_with_a_suggestion() -> None:
    from engine.cli.tasktypes import unannounced

    assert unannounced("report.generate", {"report.generate"}) is None
    assert unannounced("anything", None) is None
    assert unannounced("report.genrate", {"report.generate", "email.send"}) == (
        "no running engine handles task type 'report.genrate': did you mean 'report.generate'? "
        "give --force to go ahead anyway")
    assert unannounced("zzz", {"a.b"}) == ("no running engine handles task type 'zzz': the running engines handle "
                                          "a.b; give --force to go ahead anyway")
    assert "none is running?" in (unannounced("x", set()) or "")


def test_a_remote_worker_s_heartbeat_carries_its_pool_and_tokens_and_an_engine_s_its_pools() -> None:
    from engine.contract.heartbeat import LeasedJob
    from engine.questions.holdups import unserved

    worker = WorkerRow("w", "host", 7, 0, 10 * S, [], [LaneSlots("ANY", 1, 3)], ["job-1"], 1.0, pool="gpu",
                       jobs=[LeasedJob("job-1", (2 << 32) | 1, 0.5, "half")])
    engine = WorkerRow(**{**row("e", 10).__dict__, "pools": {"render": "gpu", "train": "tpu"}})
    assert decode_heartbeat(encode_heartbeat(worker), 10 * S) == worker
    assert decode_heartbeat(encode_heartbeat(engine), 10 * S) == engine
    assert unserved([engine, worker]) == {"train": "tpu"}
    assert unserved([engine, WorkerRow(**{**worker.__dict__, "lost": True})]) == {"render": "gpu", "train": "tpu"}
    assert worker_json(worker)["pool"] == "gpu" and worker_json(engine)["pools"] == {"render": "gpu", "train": "tpu"}
