"""engine.testing.simulate: recorded submissions replayed through the engine's rules under other settings."""

from __future__ import annotations

import logging

from engine import App, JobContext, RetryPolicy
from engine.domain.decide import TaskPolicy
from engine.domain.lanes import Lane
from engine.testing import TestEngine
from engine.testing.virtual import Setup
from engine.testing.simulate import RecordedJob, Scenario, compare, failure_lines, recorded_jobs, simulate

T0 = 1_780_000_000_000_000
SECOND = 1_000_000


def burst(tenant: str, n: int, at: int = T0, duration: int = SECOND) -> list[RecordedJob]:
    """``n`` jobs of ``tenant`` submitted at ``at``, each running ``duration`` once."""
    return [RecordedJob(f"{tenant}-{i}", tenant, "render", 5, "NORMAL", 3, at, None, {1: ("succeeded", duration)})
            for i in range(n)]


def one_slot(**weights: float) -> Scenario:
    return Scenario(Setup(lane_slots={Lane.NORMAL: 1}, weights=weights))


def by_tenant(rows: list) -> dict:  # type: ignore[type-arg]
    return {r.tenant: r for r in rows}


def test_one_slot_serves_two_tenants_alike_and_every_job_waits_its_turn() -> None:
    jobs = burst("acme", 10) + burst("zeta", 10)
    sim = simulate(jobs, one_slot())
    assert sim.unstarted == 0 and sorted(sim.waits.values()) == [n * SECOND for n in range(20)]
    rows = by_tenant(compare(jobs, sim, until=T0 + 20 * SECOND))
    assert rows["acme"].simulated_share == rows["zeta"].simulated_share == 0.5


def test_raising_a_tenants_weight_shortens_its_waits_at_the_others_expense() -> None:
    jobs = burst("acme", 10) + burst("zeta", 10)
    even = by_tenant(compare(jobs, simulate(jobs, one_slot()), until=T0 + 10 * SECOND))
    tilted = by_tenant(compare(jobs, simulate(jobs, one_slot(acme=4.0)), until=T0 + 10 * SECOND))
    assert tilted["acme"].simulated_p50_ms < even["acme"].simulated_p50_ms  # type: ignore[operator]
    assert tilted["zeta"].simulated_p50_ms > even["zeta"].simulated_p50_ms  # type: ignore[operator]
    assert tilted["acme"].simulated_share >= 0.7  # of the first ten seconds' starts


def test_more_slots_and_a_rate_limit() -> None:
    jobs = burst("acme", 10)
    wide = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 10})))
    assert set(wide.waits.values()) == {0}
    limited = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 10}), rates={"render": (2.0, 1)}))
    assert max(limited.waits.values()) >= 4 * SECOND  # ten jobs at two a second


def test_recorded_failures_are_retried_under_the_policy_given() -> None:
    job = RecordedJob("j", "acme", "render", 5, "NORMAL", 3, T0, None,
                      {1: ("failed", SECOND), 2: ("failed", SECOND), 3: ("succeeded", SECOND)})
    policies = {"render": TaskPolicy(RetryPolicy(max_attempts=3, base_delay=10, max_delay=10, jitter=0.0))}
    sim = simulate([job], Scenario(policies=policies))
    starts = [at for at, _ in sim.starts]
    assert [(b - a) // SECOND for a, b in zip(starts, starts[1:])] == [11, 11]  # one second's run, ten of backoff


def test_recorded_jobs_read_a_log_and_replaying_it_unchanged_gives_the_recorded_waits() -> None:
    app = App()

    @app.task("render", retry=RetryPolicy(max_attempts=2, base_delay=1, jitter=0.0))
    def render(ctx: JobContext, payload: dict) -> None:
        if payload["n"] == 0 and ctx.attempt == 1:
            raise ConnectionError("once")

    with TestEngine(app, lane_slots={"NORMAL": 1}) as t:
        for n in range(6):
            t.submit("render", {"n": n}, tenant="acme" if n % 2 else "zeta", delay=n)
        t.advance(seconds=30)
        events = t.events()
    jobs = recorded_jobs(events)
    assert len(jobs) == 6 and all(j.wait is not None for j in jobs)
    assert max(len(j.starts) for j in jobs) == 2
    sim = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 1}), policies=app.policies()))
    assert sim.waits == {j.job_id: j.wait for j in jobs}
    rows = compare(jobs, sim)
    assert rows and all((row.simulated_p50_ms, row.simulated_p99_ms) == (row.recorded_p50_ms, row.recorded_p99_ms)
                        for row in rows), rows


def test_replayed_over_several_partitions_each_with_its_own_fair_queue() -> None:
    jobs = burst("acme", 30) + burst("zeta", 3)
    one = simulate(jobs, one_slot())
    three = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 1}, partitions=3),
                                    rates={"render": (100.0, 10)}))
    assert one.unstarted == three.unstarted == 0 and len(three.starts) == 33
    zeta = [j.job_id for j in jobs if j.tenant == "zeta"]
    # one cluster-wide queue serves zeta at once; per-partition queues make it wait for its partitions' turns
    assert max(one.waits[j] for j in zeta) <= max(three.waits[j] for j in zeta)


def test_failures_are_counted_not_logged_one_line_each(caplog) -> None:  # type: ignore[no-untyped-def]
    jobs = [RecordedJob(f"j{i}", "acme", "render", 5, "NORMAL", 2, T0 + i, None,
                        {1: ("failed", SECOND), 2: ("failed", SECOND)}, errors={1: "ConnectionError", 2: "Timeout"})
            for i in range(300)]
    policies = {"render": TaskPolicy(RetryPolicy(max_attempts=2, base_delay=1, jitter=0.0))}
    with caplog.at_level(logging.INFO):
        sim = simulate(jobs, Scenario(Setup(lane_slots={Lane.NORMAL: 50}), policies=policies))
    assert not [r for r in caplog.records if r.name.startswith("epochq.")], caplog.records[:3]
    assert sim.failures == {("render", "ConnectionError"): 300, ("render", "Timeout"): 300}
    assert sim.dead == {"render": 300} and sim.unstarted == 0
    assert failure_lines(sim) == ["render: 600 attempt(s) failed (ConnectionError 300, Timeout 300), "
                                  "300 job(s) dead-lettered"]
