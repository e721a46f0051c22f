"""How far a remote worker lets its dispatch partitions' offsets go: past what it read, never past a record it holds
unstarted (so a worker that dies or loses the partition leaves those to the next reader)."""

from __future__ import annotations

from engine.runtime.remote.worker import Offsets


def test_an_offset_goes_past_every_record_read_when_none_is_held() -> None:
    offsets = Offsets()
    for offset in (3, 4, 5):
        offsets.read(0, offset)
    assert offsets.due([]) == {0: 6}
    assert offsets.due([]) == {}  # stored already: nothing moved


def test_an_offset_stops_at_the_first_record_held_in_its_partition_and_moves_on_as_they_start() -> None:
    offsets = Offsets()
    for partition, offset in ((0, 7), (0, 8), (1, 2), (0, 9)):
        offsets.read(partition, offset)
    assert offsets.due([(0, 8), (0, 9)]) == {0: 8, 1: 3}
    assert offsets.due([(0, 9)]) == {0: 9}  # 8 started
    assert offsets.due([]) == {0: 10}


def test_a_partition_gone_to_another_worker_is_forgotten() -> None:
    offsets = Offsets()
    offsets.read(0, 1)
    offsets.read(1, 1)
    offsets.due([])
    offsets.forget([1])
    offsets.read(0, 2)
    assert offsets.due([]) == {0: 3}
