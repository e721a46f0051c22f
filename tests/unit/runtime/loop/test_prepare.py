"""Taking several partitions at once: each one's result or error, by partition."""

from __future__ import annotations

from engine.runtime.loop.prepare import side_by_side


def test_each_partition_gets_its_result_or_its_error() -> None:
    def step(p: int) -> int:
        if p == 2:
            raise TimeoutError("broker away")
        return p * 10

    out = side_by_side(step, [0, 1, 2, 3])
    assert {p: v for p, v in out.items() if not isinstance(v, Exception)} == {0: 0, 1: 10, 3: 30}
    assert isinstance(out[2], TimeoutError)
    assert side_by_side(step, []) == {}
