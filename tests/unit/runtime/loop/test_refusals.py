"""How an owner backs off after the brokers refused its transaction for want of an ACL."""

from __future__ import annotations

from engine.runtime.loop.refusals import FIRST_HOLD_S, MAX_HOLD_S, hold_s


def test_the_hold_doubles_with_each_refusal_in_a_row_and_is_capped() -> None:
    holds = [hold_s(n) for n in range(1, 10)]
    assert holds[:4] == [FIRST_HOLD_S, 2 * FIRST_HOLD_S, 4 * FIRST_HOLD_S, 8 * FIRST_HOLD_S]
    assert holds == sorted(holds) and max(holds) == MAX_HOLD_S
    assert hold_s(10_000) == MAX_HOLD_S  # no overflow however long the grant is missing
