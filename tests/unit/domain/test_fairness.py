"""Weighted fair queuing across tenants: convergence, no burst, bounded waits, order, determinism."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain.fairness import (
    VTIME_SCALE, FairState, TenantHead, advance, charge, pick, served_shares, service_units, start_tag,
    weight_shares, within_tenant_key,
)
from engine.errors import ValidationError


def serve(state: FairState, weights: Mapping[str, float], picks: int) -> tuple[FairState, list[str]]:
    """Serve ``picks`` jobs to always-backlogged tenants; the state after and who was served."""
    order = []
    for _ in range(picks):
        tenant = pick(state, [TenantHead(t, w) for t, w in weights.items()])
        assert tenant is not None
        state = charge(state, tenant, weights[tenant])
        order.append(tenant)
    return state, order


def max_gaps(order: list[str]) -> dict[str, int]:
    """The longest run of picks between two services of each tenant."""
    last: dict[str, int] = {}
    gaps: Counter[str] = Counter()
    for i, tenant in enumerate(order):
        if tenant in last:
            gaps[tenant] = max(gaps[tenant], i - last[tenant])
        last[tenant] = i
    return dict(gaps)


def test_weights_1_2_5_converge() -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 5.0}
    _, order = serve(FairState(), weights, 8000)
    shares = served_shares(Counter(order))
    for tenant, owed in weight_shares(weights).items():
        assert shares[tenant] == pytest.approx(owed, abs=0.01)


def test_a_late_newcomer_gets_no_burst() -> None:
    weights = {"a": 1.0, "b": 1.0}
    state, _ = serve(FairState(), weights, 1000)
    joined = {**weights, "late": 1.0}
    state, order = serve(state, joined, 100)
    assert start_tag(state, "late") > 0
    assert order.count("late") <= 100 / 3 + 2


def test_an_idle_tenant_restarts_at_the_clock_not_at_zero() -> None:
    state, _ = serve(FairState(), {"a": 1.0}, 50)
    state, _ = serve(state, {"b": 1.0}, 500)
    assert start_tag(state, "a") == state.system_vtime
    _, order = serve(state, {"a": 1.0, "b": 1.0}, 100)
    assert abs(order.count("a") - 50) <= 1


def test_no_backlogged_tenant_waits_unboundedly() -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 5.0, "d": 0.5}
    _, order = serve(FairState(), weights, 5000)
    total = sum(weights.values())
    for tenant, gap in max_gaps(order).items():
        assert gap <= total / weights[tenant] + len(weights)


def test_pick_is_none_without_backlog() -> None:
    assert pick(FairState(), []) is None


def test_ties_go_to_the_heavier_tenant_then_the_older_head_then_the_id() -> None:
    state = FairState()
    assert pick(state, [TenantHead("a", 1.0), TenantHead("b", 2.0)]) == "b"
    old, new = TenantHead("z", 1.0, arrival=1), TenantHead("a", 1.0, arrival=2)
    assert pick(state, [new, old]) == "z"
    assert pick(state, [TenantHead("b", 1.0), TenantHead("a", 1.0)]) == "a"


def test_priority_order_within_a_tenant() -> None:
    jobs = [(5, 10, 1), (9, 50, 2), (5, 10, 0), (5, 5, 3), (0, 0, 4), (9, 50, 1)]
    ordered = sorted(jobs, key=lambda j: within_tenant_key(*j))
    assert ordered == [(9, 50, 1), (9, 50, 2), (5, 5, 3), (5, 10, 0), (5, 10, 1), (0, 0, 4)]


@pytest.mark.parametrize("bad", [(10, 0, 0), (-1, 0, 0), (5, -1, 0), (5, 0, -1)])
def test_within_tenant_key_refuses_out_of_range(bad: tuple[int, int, int]) -> None:
    with pytest.raises(ValidationError):
        within_tenant_key(*bad)


def test_same_starts_give_byte_identical_state() -> None:
    rng = random.Random(7)
    starts = [(rng.choice("abcdef"), rng.choice([0.3, 1.0, 2.5, 7.0])) for _ in range(2000)]
    first, second = FairState(), FairState()
    for tenant, weight in starts:
        first = charge(first, tenant, weight)
    for tenant, weight in starts:
        second = advance(second, tenant, service_units(weight))
    assert first == second and first.to_bytes() == second.to_bytes()
    assert FairState.from_bytes(first.to_bytes()) == first
    assert FairState.from_dict(first.to_dict()).to_bytes() == first.to_bytes()


def test_charge_follows_the_formula_and_keeps_the_clock_monotonic() -> None:
    state = charge(FairState(), "a", 2.0)
    assert state.system_vtime == 0 and state.finish_tags["a"] == VTIME_SCALE // 2
    state = charge(state, "a", 2.0, cost=3.0)
    assert state.system_vtime == VTIME_SCALE // 2 and state.finish_tags["a"] == 2 * VTIME_SCALE
    before = state.system_vtime
    state = charge(state, "b", 1.0)
    assert state.system_vtime == before and state.finish_tags["b"] == before + VTIME_SCALE


def test_state_keeps_only_tags_ahead_of_the_clock() -> None:
    state = FairState(100, {"old": 50, "even": 100, "ahead": 150})
    assert dict(state.finish_tags) == {"ahead": 150}
    assert start_tag(state, "old") == 100 == start_tag(state, "never-seen")


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf")])
def test_bad_weights_are_refused(weight: float) -> None:
    with pytest.raises(ValidationError, match="weight"):
        charge(FairState(), "a", weight)
    with pytest.raises(ValidationError, match="weight"):
        TenantHead("a", weight)


def test_served_shares_and_weight_shares() -> None:
    assert served_shares({"a": 1, "b": 3}) == {"a": 0.25, "b": 0.75}
    assert served_shares({"a": 0}) == {"a": 0.0}
    assert weight_shares({"a": 1.0, "b": 3.0}) == {"a": 0.25, "b": 0.75}


tenant_weights = st.lists(st.floats(0.1, 10.0), min_size=2, max_size=6)
visitors = st.lists(st.tuples(st.floats(0.1, 10.0), st.integers(0, 400), st.integers(1, 200)), max_size=4)


@settings(max_examples=60, deadline=None)
@given(weights=tenant_weights, others=visitors, window=st.integers(200, 2000))
def test_shares_of_always_backlogged_tenants_converge_to_weights(
        weights: list[float], others: list[tuple[float, int, int]], window: int) -> None:
    """Visitors join late with finite backlogs; the always-backlogged tenants still share by weight.

    Start-time fair queuing bounds |n_i/w_i - n_j/w_j| by 1/w_i + 1/w_j for two tenants
    backlogged throughout, so each share is within (1 + k)/n of its weight share.
    """
    steady = {f"s{i}": w for i, w in enumerate(weights)}
    backlog = {f"v{i}": (w, join, size) for i, (w, join, size) in enumerate(others)}
    state, counts = FairState(), Counter[str]()
    for step in range(window):
        heads = [TenantHead(t, w) for t, w in steady.items()]
        heads += [TenantHead(t, w) for t, (w, join, size) in backlog.items() if join <= step and counts[t] < size]
        tenant = pick(state, heads)
        assert tenant is not None
        state = charge(state, tenant, steady.get(tenant) or backlog[tenant][0])
        counts[tenant] += 1
    served = {t: counts[t] for t in steady}
    n, k = sum(served.values()), len(steady)
    owed, rounding = weight_shares(steady), window / VTIME_SCALE  # half a unit per service, at most
    for tenant, share in served_shares(served).items():
        assert abs(share - owed[tenant]) <= (1 + k) / n + rounding
    for a, wa in steady.items():
        for b, wb in steady.items():
            assert abs(counts[a] / wa - counts[b] / wb) <= 1 / wa + 1 / wb + rounding


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 9), st.integers(0, 10**15), st.integers(0, 10**15), st.floats(0.01, 100))
def test_a_head_read_off_a_ready_key_equals_one_built_from_its_fields(priority, due, arrival, weight) -> None:  # type: ignore[no-untyped-def]
    from projections.views import keys as k

    order = k.ready_key("NORMAL", "t", priority, due, arrival, "job-1")[len(k.ready_tenant_prefix("NORMAL", "t")):]
    read = TenantHead.from_order("t", weight, service_units(weight), order)
    built = TenantHead("t", weight, priority, due, arrival)
    assert (read, read.units, read.key) == (built, built.units, built.key)


def test_an_order_with_a_negative_due_time_is_no_head() -> None:
    with pytest.raises(ValidationError):
        TenantHead.from_order("t", 1.0, 1, b"4:-0000000000000000001:00000000000000000001:job")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from("abcde"), st.integers(0, 10**6)), st.integers(0, 10**6),
       st.sampled_from("abcdef"), st.integers(1, 10**6))
def test_advance_gives_the_canonical_state(tags, vtime, tenant, units) -> None:  # type: ignore[no-untyped-def]
    after = advance(FairState(vtime, tags), tenant, units)
    assert after == FairState(after.system_vtime, dict(after.finish_tags))
    assert after.to_bytes() == FairState(after.system_vtime, dict(after.finish_tags)).to_bytes()
