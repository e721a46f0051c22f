"""The time router: routing by window, the hot set, and which slices of the due index each sweep reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.domain.timerouter import (
    COMPACT_SLACK, SECOND, DueRange, HotSet, Band, Windows, overdue_range, overdue_sweep_due, promotion_range,
    promotion_sweep_due, band_of,
)
from engine.errors import ConfigError

W = Windows()
NOW = 1_000 * SECOND


# --- windows -----------------------------------------------------------------------------


def test_default_windows() -> None:
    assert Windows() == Windows(immediate_us=0, horizon_us=60 * SECOND, sweep_interval_us=SECOND,
                                overdue_sweep_interval_us=30 * SECOND)


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"immediate_us": -1}, "immediate_us"),
    ({"horizon_us": 0}, "horizon_us"),
    ({"immediate_us": 5 * SECOND, "horizon_us": 5 * SECOND}, "horizon_us"),
    ({"sweep_interval_us": 0}, "sweep_interval_us"),
    ({"sweep_interval_us": 60 * SECOND}, "sweep_interval_us"),
    ({"overdue_sweep_interval_us": 0}, "overdue_sweep_interval_us"),
    ({"horizon_us": 1.5}, "horizon_us"),
    ({"immediate_us": True}, "immediate_us"),
])
def test_bad_windows_name_the_setting(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=f"^windows.{named}:"):
        Windows(**kwargs)  # type: ignore[arg-type]


# --- routing -----------------------------------------------------------------------------


def test_route_bands_are_inclusive_at_the_top() -> None:
    assert band_of(NOW - 5 * SECOND, NOW, W) is Band.READY
    assert band_of(NOW, NOW, W) is Band.READY
    assert band_of(NOW + 1, NOW, W) is Band.HOT
    assert band_of(NOW + W.horizon_us, NOW, W) is Band.HOT
    assert band_of(NOW + W.horizon_us + 1, NOW, W) is Band.COLD
    assert band_of(NOW + 86_400 * SECOND, NOW, W) is Band.COLD


def test_immediate_window_queues_jobs_due_within_it() -> None:
    windows = Windows(immediate_us=50_000)
    assert band_of(NOW + 50_000, NOW, windows) is Band.READY
    assert band_of(NOW + 50_001, NOW, windows) is Band.HOT


# --- sweep ranges ------------------------------------------------------------------------


def test_fresh_owner_promotes_the_horizon_and_leaves_the_past_to_the_overdue_sweep() -> None:
    promote, overdue = promotion_range(NOW, None, W), overdue_range(NOW, W)
    assert promote == DueRange(NOW - SECOND, NOW + 60 * SECOND)
    assert overdue == DueRange(-1, NOW - SECOND)
    assert overdue.until_us == promote.after_us  # the two slices tile the time line
    assert overdue.covers(0) and not promote.covers(NOW - SECOND) and promote.covers(NOW - SECOND + 1)


def test_promotion_continues_where_the_last_one_ended() -> None:
    last = NOW + 59 * SECOND
    assert promotion_range(NOW, last, W) == DueRange(last, NOW + 60 * SECOND)
    assert promotion_range(NOW + SECOND, NOW + 60 * SECOND, W) == DueRange(NOW + 60 * SECOND, NOW + 61 * SECOND)


def test_promotion_after_a_backward_clock_jump_is_empty() -> None:
    last = NOW + 60 * SECOND
    assert promotion_range(NOW - 10 * SECOND, last, W).empty
    assert promotion_range(NOW - 10 * SECOND, last, W).after_us == last


def test_promotion_after_a_stall_starts_at_the_floor_and_asks_for_an_overdue_sweep() -> None:
    last = NOW + 60 * SECOND
    later = NOW + 3_600 * SECOND
    assert promotion_range(later, last, W) == DueRange(later - SECOND, later + 60 * SECOND)
    assert overdue_sweep_due(later, later - SECOND, last, W)


def test_overdue_range_is_empty_before_time_starts() -> None:
    assert overdue_range(0, W).empty and overdue_range(SECOND, W) == DueRange(-1, 0)


def test_when_sweeps_are_due() -> None:
    assert promotion_sweep_due(NOW, None, W)
    assert not promotion_sweep_due(NOW, NOW + 60 * SECOND, W)
    assert not promotion_sweep_due(NOW + SECOND - 1, NOW + 60 * SECOND, W)
    assert promotion_sweep_due(NOW + SECOND, NOW + 60 * SECOND, W)
    promoted = NOW + 60 * SECOND
    assert overdue_sweep_due(NOW, None, promoted, W)
    assert not overdue_sweep_due(NOW + 29 * SECOND, NOW, promoted + 29 * SECOND, W)
    assert overdue_sweep_due(NOW + 30 * SECOND, NOW, promoted + 30 * SECOND, W)
    assert overdue_sweep_due(NOW + SECOND, NOW, None, W)


# --- the hot set -------------------------------------------------------------------------


def test_hot_set_refuses_jobs_beyond_its_horizon() -> None:
    hot = HotSet(horizon_end_us=100)
    assert hot.add(100, "a") and not hot.add(101, "b")
    assert len(hot) == 1 and "a" in hot and "b" not in hot and hot.horizon_end == 100


def test_pop_due_by_due_time_then_job_id_within_limit() -> None:
    hot = HotSet(horizon_end_us=1_000)
    for due, job in [(30, "c"), (10, "b"), (10, "a"), (20, "d"), (50, "e")]:
        hot.add(due, job)
    assert hot.pop_due(5, 10) == []
    assert hot.pop_due(30, 2) == ["a", "b"]
    assert hot.pop_due(30, 10) == ["d", "c"]
    assert len(hot) == 1 and hot.next_due_us() == 50
    assert hot.pop_due(1_000, 0) == [] and hot.pop_due(1_000, 10) == ["e"] and hot.next_due_us() is None


def test_remove_is_lazy_and_a_removed_job_never_pops() -> None:
    hot = HotSet(horizon_end_us=1_000)
    hot.add(10, "a")
    hot.add(20, "b")
    assert hot.remove("a") and not hot.remove("a") and not hot.remove("zzz")
    assert len(hot) == 1 and hot.heap_size == 2
    assert hot.next_due_us() == 20 and hot.heap_size == 1
    assert hot.pop_due(100, 10) == ["b"]


def test_reschedule_moves_the_timer() -> None:
    hot = HotSet(horizon_end_us=1_000)
    hot.add(10, "a")
    hot.add(50, "a")
    assert hot.due_of("a") == 50 and len(hot) == 1
    assert hot.pop_due(40, 10) == []
    hot.add(900, "a")
    assert hot.add(10, "a") and hot.pop_due(40, 10) == ["a"] and len(hot) == 0
    hot.add(20, "b")
    assert not hot.add(5_000, "b") and "b" not in hot  # moved beyond the horizon: back to disk only


def test_adding_the_same_timer_twice_is_a_no_op() -> None:
    hot = HotSet(horizon_end_us=1_000)
    assert hot.add(10, "a") and hot.add(10, "a")
    assert hot.heap_size == 1 and hot.pop_due(10, 10) == ["a"]


def test_heap_stays_proportional_to_live_timers_under_churn() -> None:
    hot = HotSet(horizon_end_us=10**9)
    for n in range(10_000):
        hot.add(n, f"job-{n % 10}")
    assert len(hot) == 10 and hot.heap_size <= 2 * len(hot) + COMPACT_SLACK
    for n in range(10):
        hot.remove(f"job-{n}")
    assert len(hot) == 0 and hot.heap_size <= COMPACT_SLACK


def test_promote_raises_the_horizon_and_counts_new_timers() -> None:
    hot = HotSet()
    assert hot.promote([(10, "a"), (20, "b"), (30, "c")], until_us=30) == 3
    assert hot.promote([(30, "c"), (40, "d")], until_us=40) == 1
    assert hot.promote([], until_us=35) == 0 and hot.horizon_end == 40  # never lowered
    assert hot.pop_due(100, 10) == ["a", "b", "c", "d"]


# --- properties --------------------------------------------------------------------------

SMALL = Windows(immediate_us=0, horizon_us=100, sweep_interval_us=10, overdue_sweep_interval_us=50)
LAST_DUE = 1_200


@dataclass
class Engine:
    """The engine loop around the pure parts, with a dict standing in for the disk due index."""

    windows: Windows
    disk: dict[str, int] = field(default_factory=dict)
    hot: HotSet = field(default_factory=HotSet)
    due: dict[str, int] = field(default_factory=dict)
    fired: dict[str, int] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    by_overdue: list[str] = field(default_factory=list)
    ready: set[str] = field(default_factory=set)
    promoted_until: int | None = None

    def submit(self, job: str, due: int, now: int) -> None:
        self.due[job] = due
        if band_of(due, now, self.windows) is Band.READY:
            self.ready.add(job)
            self.fire(job, now)
        else:
            self.disk[job] = due
            self.hot.add(due, job)

    def change(self, job: str, new_due: int | None, now: int) -> None:
        if job not in self.disk:
            return  # already fired: a cancel or reschedule comes too late
        if new_due is None:
            self.cancelled.add(job)
            del self.disk[job]
            self.hot.remove(job)
        else:
            self.submit(job, new_due, now)

    def promote(self, now: int) -> None:
        ranges = promotion_range(now, self.promoted_until, self.windows)
        self.hot.promote(sorted((d, j) for j, d in self.disk.items() if ranges.covers(d)), ranges.until_us)
        self.promoted_until = ranges.until_us

    def pop(self, now: int, limit: int) -> None:
        for job in self.hot.pop_due(now, limit):
            assert job in self.disk, f"{job} popped though no longer scheduled"
            self.fire(job, now)

    def sweep_overdue(self, now: int) -> None:
        ranges = overdue_range(now, self.windows)
        for job in [j for j, d in sorted(self.disk.items(), key=lambda e: e[1]) if ranges.covers(d)]:
            self.by_overdue.append(job)
            self.fire(job, now)

    def fire(self, job: str, now: int) -> None:
        assert job not in self.fired, f"{job} fired twice"
        assert self.due[job] <= now, f"{job} fired at {now}, before its due time {self.due[job]}"
        self.fired[job] = now
        self.disk.pop(job, None)
        self.hot.remove(job)

    def check_memory(self) -> None:
        assert all(self.hot.due_of(j) in (None, d) for j, d in self.disk.items())
        assert len(self.hot) <= sum(1 for d in self.disk.values() if d <= self.hot.horizon_end)
        assert self.hot.heap_size <= 2 * len(self.hot) + COMPACT_SLACK


Submits = list[tuple[int, str, int]]
Changes = list[tuple[int, str, int | None]]
job_strategy = st.tuples(st.integers(0, 1_000), st.integers(0, LAST_DUE),
                         st.none() | st.tuples(st.integers(0, 1_000), st.none() | st.integers(0, LAST_DUE)))
steps_strategy = st.lists(st.tuples(st.integers(0, 1_400), st.booleans(), st.booleans(), st.integers(0, 5)),
                          max_size=40)


def plan(jobs: list[tuple[int, int, tuple[int, int | None] | None]]) -> tuple[Submits, Changes]:
    """Submissions (at, job, due) and later cancels/reschedules (at, job, new due or None), by time."""
    submits = sorted((at, f"job{n}", due) for n, (at, due, _) in enumerate(jobs))
    changes = sorted((at + later, f"job{n}", new_due) for n, (at, _, change) in enumerate(jobs)
                     if change for later, new_due in [change])
    return submits, changes


def advance(engine: Engine, now: int, submits: Submits, changes: Changes) -> None:
    """Fold everything that happened up to ``now``: submissions first, then cancels and reschedules."""
    while submits and submits[0][0] <= now:
        _, job, due = submits.pop(0)
        engine.submit(job, due, now)
    while changes and changes[0][0] <= now:
        _, job, new_due = changes.pop(0)
        engine.change(job, new_due, now)


@settings(max_examples=300, deadline=None)
@given(jobs=st.lists(job_strategy, max_size=60), steps=steps_strategy)
def test_every_job_fires_exactly_once_and_never_early(jobs: list[tuple[int, int, tuple[int, int | None] | None]],
                                                       steps: list[tuple[int, bool, bool, int]]) -> None:
    engine = Engine(SMALL)
    submits, changes = plan(jobs)
    final = 2_000 + LAST_DUE + SMALL.horizon_us
    for now, promote, overdue, limit in [*sorted(steps), (final, True, True, len(jobs) + 1)]:
        advance(engine, now, submits, changes)
        if promote:
            engine.promote(now)
        engine.pop(now, limit)
        if overdue:
            engine.sweep_overdue(now)
        engine.check_memory()
    assert sorted([*engine.fired, *engine.cancelled]) == sorted(f"job{n}" for n in range(len(jobs)))


@settings(max_examples=200, deadline=None)
@given(jobs=st.lists(job_strategy, max_size=60))
def test_a_healthy_engine_fires_everything_from_memory_on_time(
        jobs: list[tuple[int, int, tuple[int, int | None] | None]]) -> None:
    engine = Engine(SMALL)
    submits, changes = plan(jobs)
    for now in range(0, 2_000 + LAST_DUE + SMALL.horizon_us, SMALL.sweep_interval_us):
        advance(engine, now, submits, changes)
        if promotion_sweep_due(now, engine.promoted_until, SMALL):
            engine.promote(now)
        engine.pop(now, len(jobs) + 1)
        engine.sweep_overdue(now)
    assert len(engine.fired) + len(engine.cancelled) == len(jobs) and engine.by_overdue == []
    popped = [j for j in engine.fired if j not in engine.ready]
    assert all(engine.fired[j] - engine.due[j] < SMALL.sweep_interval_us for j in popped)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "pop", "peek"]), st.integers(0, 4), st.integers(0, 200)),
                max_size=80))
@example([("add", 1, 10), ("add", 1, 50), ("pop", 1, 20)])
def test_hot_set_agrees_with_a_plain_dict(ops: list[tuple[str, int, int]]) -> None:
    hot, model, horizon = HotSet(horizon_end_us=150), {}, 150
    for op, n, t in ops:
        job = f"j{n}"
        if op == "add":
            assert hot.add(t, job) == (t <= horizon)
            if t <= horizon:
                model[job] = t
            else:
                model.pop(job, None)
        elif op == "remove":
            assert hot.remove(job) == (model.pop(job, None) is not None)
        elif op == "peek":
            assert hot.next_due_us() == min(model.values(), default=None)
        else:
            expected = sorted((d, j) for j, d in model.items() if d <= t)[:3]
            assert hot.pop_due(t, 3) == [j for _, j in expected]
            for _, j in expected:
                del model[j]
        assert len(hot) == len(model) and all(hot.due_of(j) == d for j, d in model.items())
