"""Circuit breaker per task type: every transition, with an injected clock (µs)."""

from __future__ import annotations

import pytest

from engine.domain.breaker import (
    CLOSED, BreakerClosed, BreakerHalfOpened, BreakerOpened, BreakerPolicy, BreakerState, BreakerStatus,
    Transition, apply, may_start, on_cooled_down, on_failure, on_requeued, on_started, on_success,
)

S = 1_000_000
POLICY = BreakerPolicy(failure_threshold=3, window_s=10.0, cooldown_s=30.0)


def fail_at(state: BreakerState, *times: int) -> tuple[BreakerState, list[Transition]]:
    """The state after failures at ``times`` (seconds), and the transitions they caused."""
    transitions = []
    for t in times:
        state, transition = on_failure(state, POLICY, t * S)
        if transition is not None:
            transitions.append(transition)
    return state, transitions


def opened_at(t: int) -> BreakerState:
    state, _ = fail_at(CLOSED, t - 2, t - 1, t)
    assert state.status is BreakerStatus.OPEN
    return state


def test_closed_allows_every_start() -> None:
    decision = may_start(CLOSED, POLICY, 0)
    assert decision.allowed and decision.state == CLOSED and decision.transition is None


def test_threshold_within_the_window_opens() -> None:
    state, transitions = fail_at(CLOSED, 100, 105, 109)
    assert state == BreakerState(BreakerStatus.OPEN, (), 109 * S, False)
    assert transitions == [BreakerOpened(109 * S, 139 * S, 3, "3 failures within 10s")]


def test_failures_spread_beyond_the_window_do_not_open() -> None:
    state, transitions = fail_at(CLOSED, 100, 108, 111, 119, 122, 130)
    assert state.status is BreakerStatus.CLOSED and transitions == []
    assert state.failures == (122 * S, 130 * S)


def test_failures_kept_are_bounded_by_the_threshold() -> None:
    policy = BreakerPolicy(failure_threshold=2, window_s=100.0, cooldown_s=1.0)
    state, _ = on_failure(CLOSED, policy, 1)
    assert state.failures == (1,)
    state, _ = on_success(state, policy, 200 * S)
    assert state.failures == ()


def test_open_blocks_until_the_cooldown_passed() -> None:
    state = opened_at(100)
    for now in (100, 110, 129):
        decision = may_start(state, POLICY, now * S)
        assert not decision.allowed and decision.state == state and decision.retry_at == 130 * S


def test_after_the_cooldown_exactly_one_probe_starts() -> None:
    decision = may_start(opened_at(100), POLICY, 130 * S)
    assert decision.allowed
    assert decision.transition == BreakerHalfOpened(130 * S, "cool-down of 30s passed")
    assert decision.state.status is BreakerStatus.HALF_OPEN and decision.state.probe_in_flight
    second = may_start(decision.state, POLICY, 131 * S)
    assert not second.allowed and second.transition is None and second.retry_at is None


def test_the_cool_down_timer_half_opens_and_the_next_start_is_the_probe() -> None:
    state, half = on_cooled_down(opened_at(100), POLICY, 130 * S)
    assert half == BreakerHalfOpened(130 * S, "cool-down of 30s ended")
    assert state.status is BreakerStatus.HALF_OPEN and not state.probe_in_flight
    probe = may_start(state, POLICY, 131 * S)
    assert probe.allowed and probe.transition is None and probe.state.probe_in_flight
    assert not may_start(probe.state, POLICY, 132 * S).allowed


def test_an_early_or_stale_cool_down_timer_changes_nothing() -> None:
    early = opened_at(100)
    assert on_cooled_down(early, POLICY, 129 * S) == (early, None)
    half = apply(early, BreakerHalfOpened(130 * S, "x"))
    assert on_cooled_down(half, POLICY, 140 * S) == (half, None)
    assert on_cooled_down(CLOSED, POLICY, 140 * S) == (CLOSED, None)


def test_probe_success_closes() -> None:
    probing = may_start(opened_at(100), POLICY, 130 * S).state
    state, transition = on_success(probing, POLICY, 131 * S)
    assert state == CLOSED and transition == BreakerClosed(131 * S, "probe succeeded")
    assert may_start(state, POLICY, 131 * S).allowed


def test_probe_failure_reopens_with_a_new_cooldown() -> None:
    probing = may_start(opened_at(100), POLICY, 130 * S).state
    state, transition = on_failure(probing, POLICY, 135 * S)
    assert transition == BreakerOpened(135 * S, 165 * S, 1, "probe failed")
    assert state.status is BreakerStatus.OPEN and state.opened_at == 135 * S
    assert not may_start(state, POLICY, 160 * S).allowed
    assert may_start(state, POLICY, 165 * S).allowed


def test_outcomes_while_open_change_nothing() -> None:
    state = opened_at(100)
    assert on_failure(state, POLICY, 101 * S) == (state, None)
    assert on_success(state, POLICY, 101 * S) == (state, None)


def test_a_requeued_probe_frees_the_probe_slot() -> None:
    probing = may_start(opened_at(100), POLICY, 130 * S).state
    freed = on_requeued(probing)
    assert freed.status is BreakerStatus.HALF_OPEN and not freed.probe_in_flight
    assert may_start(freed, POLICY, 140 * S).allowed
    assert on_requeued(CLOSED) == CLOSED and on_started(CLOSED) == CLOSED


def test_folding_the_transitions_reaches_the_decided_state() -> None:
    state = CLOSED
    for t in (1, 2):
        state, _ = on_failure(state, POLICY, t * S)
    decided, opened = on_failure(state, POLICY, 3 * S)
    assert isinstance(opened, BreakerOpened) and apply(state, opened) == decided
    probe = may_start(decided, POLICY, 40 * S)
    assert probe.transition is not None
    assert on_started(apply(decided, probe.transition)) == probe.state
    closed, done = on_success(probe.state, POLICY, 41 * S)
    assert done is not None and apply(probe.state, done) == closed == CLOSED


def test_state_round_trips_through_a_dict() -> None:
    for state in (CLOSED, opened_at(100), may_start(opened_at(100), POLICY, 200 * S).state,
                  fail_at(CLOSED, 1, 2)[0]):
        assert BreakerState.from_dict(state.to_dict()) == state


@pytest.mark.parametrize("kwargs", [{"failure_threshold": 0}, {"window_s": 0}, {"cooldown_s": -1},
                                    {"window_s": float("nan")}, {"failure_threshold": True}])
def test_bad_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        BreakerPolicy(**kwargs)  # type: ignore[arg-type]
