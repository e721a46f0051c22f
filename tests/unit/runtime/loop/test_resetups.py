"""How long a partition waits before it is set up again after its producer failed for good without a fence (pure)."""

from __future__ import annotations

from engine.runtime.loop.resetups import MAX_DELAY_S, STABLE_S, delay_s, in_a_row


def test_the_delay_doubles_from_half_a_second_to_thirty() -> None:
    assert [delay_s(n) for n in range(1, 9)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert delay_s(10_000) == MAX_DELAY_S and delay_s(0) == 0.5


def test_a_partition_active_a_minute_starts_a_new_series() -> None:
    count = 0
    for _ in range(5):  # failing again soon after each set-up: each one waits longer
        count = in_a_row(count, 2.0)
    assert count == 5 and delay_s(count) == 8.0
    assert in_a_row(count, STABLE_S) == 1 and in_a_row(count, STABLE_S - 0.1) == 6
