"""Scheduling policy on a real broker: fairness under a flood, lanes, backpressure, breakers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import TopicPartition

from engine.client import Client, Outcome
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.runtime import kafka
from engine.runtime.tenants import set_tenant
from engine.questions.stores import read_store
from projections.store import store_path
from projections.views import keys as k
from tests.integration.conftest import eventually, start_engine


class Finishes:
    """Follows the events topic: when each tenant's jobs succeeded, and every event per job."""

    def __init__(self, settings: Settings):
        self.consumer = kafka.events_reader(settings, "test-follow")
        self.topic = settings.events_topic
        self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(3)])
        self.done: dict[str, list[float]] = defaultdict(list)
        self.events: list[m.Event] = []
        self.partition_of: dict[str, int] = {}

    def until(self, predicate, timeout: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out; done so far: { {t: len(v) for t, v in self.done.items()} }"
            for msg in self.consumer.consume(5000, 0.2):
                if msg.error():
                    continue
                event = decode_event_at(msg.value(), self.topic, msg.partition(), msg.offset())
                self.events.append(event)
                self.partition_of[event.event_id] = msg.partition()
                if isinstance(event.body, m.JobSucceeded):
                    self.done[event.tenant_id].append(time.monotonic())

    def close(self) -> None:
        self.consumer.close()


def test_a_flood_from_one_tenant_does_not_starve_another(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--concurrency", "8"))
    engine.wait_active(3)
    follow = Finishes(settings)
    try:
        t0 = time.monotonic()
        client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "quiet"} for _ in range(100)])
        follow.until(lambda: len(follow.done["quiet"]) >= 100, 60)
        alone = max(follow.done["quiet"]) - t0

        for _ in range(0, 10_000, 2000):
            client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "noisy"} for _ in range(2000)])
        follow.until(lambda: len(follow.done["noisy"]) >= 200, 60)
        t1 = time.monotonic()
        client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "quiet"} for _ in range(100)])
        follow.until(lambda: len(follow.done["quiet"]) >= 200, 120)
        flooded = max(follow.done["quiet"]) - t1
        noisy_done_then = len(follow.done["noisy"])
        print(f"quiet tenant's 100 jobs: {alone:.2f}s alone, {flooded:.2f}s behind a 10,000-job flood "
              f"(flood {noisy_done_then}/10000 done by then)")
        assert noisy_done_then < 6000, "the quiet tenant waited for most of the flood"
        assert flooded < max(10 * alone, alone + 10), (alone, flooded)
        shown = subprocess.run([sys.executable, "-m", "engine.cli.main", "queues", "--json", "--bootstrap",
                                settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir",
                                str(engine.state_dir)], capture_output=True, text=True, check=True)
        normal = json.loads(shown.stdout)["NORMAL"]
        assert normal["tenants"]["quiet"]["served"] == 200 and normal["tenants"]["noisy"]["queued"] > 0
    finally:
        follow.close()


def ended_at(outcome: Outcome) -> int:
    """When the job succeeded (µs, the engine's clock)."""
    return next(e.event.occurred_at for e in outcome.events if e.event.type == "JobSucceeded")


def test_high_lane_is_not_blocked_by_a_full_batch_lane(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--slots", "BATCH=2", "--grace", "1"))  # the
    # bulk jobs still running at the end are handed back 1 s into the stop
    engine.wait_active(3)
    bulk = client.submit_many([{"task_type": "bulk", "payload": {"seconds": 3}, "tenant": "acme"} for _ in range(10)])
    running = eventually(lambda: len(r := [h for h in bulk if client.status(h.job_id).status == "running"]) == 2
                         and r, 30, "the BATCH lane full (its 2 slots running)")
    outcome = client.submit("otp", {}, tenant="acme", priority="critical").wait(10)
    assert outcome.status == "completed"
    queued = [h for h in bulk if client.status(h.job_id).status == "queued"]
    assert len(queued) >= 6, "the BATCH lane is throttled to its 2 slots"
    first_bulk_end = min(ended_at(h.wait(10)) for h in running)  # each runs for 3 s
    assert ended_at(outcome) < first_bulk_end, "the HIGH job waited for a BATCH job to end"


def test_backpressure_rejection_reaches_the_client(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    set_tenant(settings, "small", weight=1.0, max_queued=5)
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--concurrency", "1"))
    engine.wait_active(3)
    slow = {"task_type": "slow", "payload": {"seconds": 2}, "tenant": "small"}
    handles = client.submit_many([dict(slow) for _ in range(20)])
    # each submit admitted (queued, then running and done, one at a time) or rejected: the admission is what counts
    outcomes = client.wait_all(handles, 30, until=lambda o: o.status not in ("submitted", "accepted"))
    assert all(o.status in ("rejected", "queued", "running", "completed") for o in outcomes), outcomes
    rejected = [o for o in outcomes if o.status == "rejected"]
    assert rejected and all(o.reason == "tenant_queue_full" for o in rejected)
    assert "limit is 5" in rejected[0].error
    depth = next(e.event.body.depth for e in rejected[0].events if e.event.type == "JobRejected")
    assert depth is not None and depth >= 5
    assert len(rejected) <= 20 - 5


def test_breaker_opens_holds_jobs_and_a_probe_closes_it(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--concurrency", "1"))
    engine.wait_active(3)
    fix = tmp_path / "fixed"
    handles = [client.submit("fragile", {"fixed_when": str(fix)}, tenant="acme", idempotency_key=f"f{i}")
               for i in range(12)]
    follow = Finishes(settings)
    try:
        follow.until(lambda: any(isinstance(e.body, m.BreakerOpened) for e in follow.events), 60)
        deadline = time.monotonic() + 1.5  # on purpose: 1.5 s of the cool-down (3 s) in which no other job may start
        follow.until(lambda: time.monotonic() > deadline, 10)
        dead = [e for e in follow.events if isinstance(e.body, m.JobDeadLettered)]
        started = [e for e in follow.events if isinstance(e.body, m.JobStarted)]
        assert len(dead) == 3 and len(started) == 3, "after 3 failures the rest of the type waits, queued"
        opened = next(e for e in follow.events if isinstance(e.body, m.BreakerOpened))
        assert cool_downs(settings, engine.state_dir) == [k.breaker_due_key(opened.body.reopen_at, "fragile")]
        fix.touch()
        follow.until(lambda: any(isinstance(e.body, m.BreakerClosed) for e in follow.events), 60)
        kinds = [type(e.body).__name__ for e in follow.events if type(e.body).__name__.startswith("Breaker")]
        assert kinds == ["BreakerOpened", "BreakerHalfOpened", "BreakerClosed"], kinds
        half = next(e for e in follow.events if isinstance(e.body, m.BreakerHalfOpened))
        assert half.occurred_at >= opened.body.reopen_at, "the cool-down ended no earlier than it said"
        assert cool_downs(settings, engine.state_dir) == [], "the fired cool-down left the due index"
        final = [h.wait(30).status for h in handles]
        assert final.count("completed") == 9 and final.count("dead") == 3, final
        shown = subprocess.run([sys.executable, "-m", "engine.cli.main", "breakers", "--json", "--bootstrap",
                                settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir",
                                str(engine.state_dir)], capture_output=True, text=True, check=True)
        assert json.loads(shown.stdout)[0]["status"] == "closed"
    finally:
        follow.close()


def cool_downs(settings: Settings, state_dir: Path) -> list[bytes]:
    """The breaker cool-down entries in the due-time indexes of the engine's stores (read-only)."""
    found = []
    for p in range(3):  # the owner's stores: the write model that decides when a breaker reopens
        with read_store(store_path(Path(state_dir), settings.namespace, p)) as store:
            found += [key for key, _ in store.scan(k.BREAKER_DUE)]
    return found


def test_fair_shares_continue_after_a_failover(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    set_tenant(settings, "light", weight=1.0)
    set_tenant(settings, "heavy", weight=3.0)
    a = start_engine(engines, settings, "a", tmp_path, extra=("--concurrency", "4"))
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path, extra=("--concurrency", "4"))
    b.wait_active(1)
    for tenant in ("light", "heavy"):
        client.submit_many([{"task_type": "slow", "payload": {"seconds": 0.01}, "tenant": tenant} for _ in range(3000)])
    follow = Finishes(settings)
    try:
        follow.until(lambda: sum(len(v) for v in follow.done.values()) >= 300, 60)
        killed_at = time.time_ns() // 1000
        a.signal(signal.SIGKILL)
        taken = lambda: {follow.partition_of[e.event_id]: e.epoch for e in follow.events  # noqa: E731
                         if isinstance(e.body, m.OwnershipClaimed) and e.owner == "b" and e.occurred_at > killed_at}
        follow.until(lambda: len(taken()) >= 2, 60)
        moved = taken()

        def starts_after_takeover(p: int) -> list[str]:
            return [e.tenant_id for e in follow.events if isinstance(e.body, m.JobStarted)
                    and e.epoch == moved[p] and follow.partition_of[e.event_id] == p]

        follow.until(lambda: all(len(starts_after_takeover(p)) >= 200 for p in moved), 90)
        for p in moved:
            window = starts_after_takeover(p)[:200]
            heavy_share = window.count("heavy") / len(window)
            print(f"partition {p} after takeover by b: heavy {heavy_share:.3f} of 200 starts (weights 3:1 -> 0.750)")
            assert 0.70 <= heavy_share <= 0.80, heavy_share
    finally:
        follow.close()
