"""LaneThreads: calls run, threads are reused and bounded, shutdown drops what has not started."""

from __future__ import annotations

import threading

import pytest

from engine.runtime.execution.lanethreads import LaneThreads
from engine.errors import ConfigError, IllegalStateError


def test_sequential_calls_reuse_one_idle_thread():
    lane = LaneThreads("t", 8)
    for n in range(50):
        done = threading.Event()
        lane.submit(done.set)
        assert done.wait(5), f"call {n} did not run"
        _wait_idle(lane)
    assert lane.threads() == 1
    lane.shutdown()


def test_blocked_calls_use_at_most_the_limit_and_all_run():
    lane = LaneThreads("t", 4)
    gate, ran, lock = threading.Event(), [], threading.Lock()

    def work(n: int) -> None:
        gate.wait(5)
        with lock:
            ran.append(n)

    for n in range(20):
        lane.submit(work, n)
    assert lane.threads() == 4
    gate.set()
    _until(lambda: len(ran) == 20)
    assert sorted(ran) == list(range(20))
    lane.shutdown()


def test_a_failing_call_keeps_its_thread_serving():
    lane = LaneThreads("t", 1)
    lane.submit(lambda: 1 / 0)
    done = threading.Event()
    lane.submit(done.set)
    assert done.wait(5)
    lane.shutdown()


def test_shutdown_drops_queued_calls_and_refuses_new_ones():
    lane = LaneThreads("t", 1)
    gate, ran = threading.Event(), []
    lane.submit(gate.wait, 5)
    lane.submit(ran.append, "late")
    lane.shutdown()
    gate.set()
    with pytest.raises(IllegalStateError, match="shut down"):
        lane.submit(ran.append, "new")
    assert ran == []


def test_a_lane_needs_a_thread():
    with pytest.raises(ConfigError, match="at least one thread"):
        LaneThreads("t", 0)


def _wait_idle(lane: LaneThreads) -> None:
    _until(lambda: lane._idle > 0)  # private: the reuse this test is about


def _until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    end = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        end.wait(0.01)
    raise AssertionError("condition not met in time")
