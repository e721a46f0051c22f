"""engine.testing.TestEngine: the engine's rules on a virtual clock, in memory, for users' tests of their handlers."""

from __future__ import annotations

import inspect
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from engine import App, JobContext, RetryPolicy
from engine.contract import messages as m
from engine.errors import ValidationError
from engine.testing import TestEngine

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
HOUR_US = 3600 * 1_000_000


def types(events: list[m.Event]) -> list[str]:
    return [type(e.body).__name__ for e in events]


def flaky_app(fail_times: int, calls: list[JobContext], base_delay: float = 3600.0) -> App:
    app = App()

    @app.task("payment.capture", retry=RetryPolicy(max_attempts=5, base_delay=base_delay, max_delay=base_delay))
    def capture(ctx: JobContext, payload: dict) -> dict:
        calls.append(ctx)
        if ctx.attempt <= fail_times:
            raise ConnectionError("gateway down")
        return {"captured": payload["amount"]}

    return app


def test_retries_an_hour_apart_complete_on_the_third_attempt_after_advancing_five_hours() -> None:
    calls: list[JobContext] = []
    with TestEngine(flaky_app(2, calls), start=START) as t:
        job = t.submit("payment.capture", {"amount": 5}, tenant="acme")
        t.run_until_idle()
        assert t.status(job.job_id).status == "retrying"
        t.advance(hours=5)
        outcome = t.status(job.job_id)
        assert (outcome.status, outcome.attempts, outcome.result) == ("completed", 3, {"captured": 5})
        history = t.history(job.job_id)
    assert types(history) == ["JobSubmitted", "JobQueued", "JobStarted", "JobFailed", "JobRetryScheduled",
                              "JobQueued", "JobStarted", "JobFailed", "JobRetryScheduled",
                              "JobQueued", "JobStarted", "JobSucceeded"]
    starts = [e.occurred_at for e in history if isinstance(e.body, m.JobStarted)]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(0.8 * HOUR_US <= gap <= HOUR_US for gap in gaps), gaps  # the policy's delay, less its jitter
    assert [c.attempt for c in calls] == [1, 2, 3]


def test_handlers_get_a_real_job_context() -> None:
    calls: list[JobContext] = []
    with TestEngine(flaky_app(0, calls)) as t:
        job = t.submit("payment.capture", {"amount": 1}, tenant="acme", idempotency_key="order-7")
        t.run_until_idle()
    (ctx,) = calls
    assert isinstance(ctx, JobContext)
    assert (ctx.job_id, ctx.tenant, ctx.task_type, ctx.attempt, ctx.epoch, ctx.idempotency_key) == \
        (job.job_id, "acme", "payment.capture", 1, 1, "order-7")


def test_a_delayed_job_starts_at_its_due_time_and_not_before() -> None:
    calls: list[JobContext] = []
    with TestEngine(flaky_app(0, calls), start=START) as t:
        job = t.submit("payment.capture", {"amount": 2}, tenant="acme", delay=600)
        t.advance(minutes=9)
        assert t.status(job.job_id).status == "scheduled" and not calls
        t.advance(minutes=1)
        assert t.status(job.job_id).status == "completed"
        started = next(e for e in t.history(job.job_id) if isinstance(e.body, m.JobStarted))
    assert started.occurred_at == t.now_us == int(START.timestamp() * 1e6) + 600 * 1_000_000


def test_a_cron_schedule_fires_at_each_occurrence_across_an_advance() -> None:
    app, runs = App(), []

    @app.task("report.build")
    def build(ctx: JobContext, payload: dict) -> None:
        runs.append(ctx.job_id)

    with TestEngine(app, start=START) as t:
        receipt = t.add_schedule("quarterly", "report.build", "*/15 * * * *", tenant="acme", payload={})
        assert receipt.accepted and receipt.armed == int(START.timestamp() * 1e6) + 15 * 60 * 1_000_000
        t.advance(hours=1)
        fired = [e for e in t.events() if isinstance(e.body, m.ScheduleFired)]
        assert [(e.body.occurrence_at - fired[0].body.occurrence_at) // 60_000_000 for e in fired] == [0, 15, 30, 45]
        assert len(runs) == 4 and all(t.status(j).status == "completed" for j in runs)
        assert [s.schedule_id for s in t.schedules(tenant="acme")] == ["quarterly"]


def test_cancel_a_waiting_job_and_its_handler_never_runs() -> None:
    calls: list[JobContext] = []
    with TestEngine(flaky_app(0, calls)) as t:
        job = t.submit("payment.capture", {"amount": 3}, tenant="acme", delay=60)
        t.run_until_idle()
        t.cancel(job.job_id, reason="customer left")
        t.advance(minutes=5)
        outcome = t.status(job.job_id)
    assert (outcome.status, outcome.reason) == ("cancelled", "customer left")
    assert not calls


def test_a_handler_raising_a_validation_error_goes_to_dead_at_once() -> None:
    app = App()

    @app.task("email.send", retry=RetryPolicy(max_attempts=5, base_delay=1))
    def send(ctx: JobContext, payload: dict) -> None:
        raise ValidationError("to: not an address", "to")

    with TestEngine(app) as t:
        job = t.submit("email.send", {"to": "nobody"}, tenant="acme")
        t.advance(minutes=10)
        outcome = t.status(job.job_id)
        assert types(t.history(job.job_id))[-2:] == ["JobFailed", "JobDeadLettered"]
    assert (outcome.status, outcome.attempts) == ("dead", 1)


@pytest.mark.parametrize(("weights", "acme_share"), [({}, 4), ({"acme": 3.0}, 6)])
def test_fair_queuing_between_two_tenants_with_one_slot(weights: dict[str, float], acme_share: int) -> None:
    app = App()

    @app.task("thumb.render")
    def render(ctx: JobContext, payload: dict) -> None:
        return None

    with TestEngine(app, lane_slots={"NORMAL": 1}, weights=weights) as t:
        for tenant in ("acme", "zeta"):
            for n in range(8):  # acme's all submitted first: FIFO would start them all first
                t.submit("thumb.render", {"n": n}, tenant=tenant)
        t.run_until_idle()
        order = [e.tenant_id for e in t.events() if isinstance(e.body, m.JobStarted)]
    assert len(order) == 16 and order[:8].count("acme") == acme_share  # served in proportion to the weights
    if not weights:
        assert order == ["acme", "zeta"] * 8


def test_async_handlers_and_unknown_task_types() -> None:
    app = App()

    @app.task("ping")
    async def ping(ctx: JobContext, payload: dict) -> str:
        return f"pong {ctx.attempt}"

    with TestEngine(app) as t:
        ok = t.submit("ping", {}, tenant="acme")
        unknown = t.submit("no.such.task", {}, tenant="acme")
        t.run_until_idle()
        assert t.status(ok.job_id).result == "pong 1"
        assert t.status(unknown.job_id).status == "rejected"


def test_submit_checks_values_and_mirrors_the_client() -> None:
    from engine.client import Client, Outcome

    client_params = list(inspect.signature(Client.submit).parameters.values())[1:]
    assert list(inspect.signature(TestEngine.submit).parameters.values())[1:] == client_params
    with TestEngine(App()) as t:
        with pytest.raises(ValidationError, match="priority"):
            t.submit("x", {}, tenant="acme", priority=12)
        assert isinstance(t.status("nothing"), Outcome) and t.status("nothing").status == "unknown"
        with pytest.raises(ValidationError, match="forward"):
            t.advance(seconds=-1)


def test_engine_testing_imports_no_kafka_client_and_no_rocksdb() -> None:
    code = "import sys, engine.testing; print(sorted(m for m in ('confluent_kafka', 'rocksdict') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_breaker_opens_then_lets_one_job_through_after_its_cool_down() -> None:
    from engine.domain.breaker import BreakerPolicy

    app, healthy = App(), [False]

    @app.task("sms.send", retry=RetryPolicy(max_attempts=1), breaker=BreakerPolicy(2, 60.0, 30.0))
    def send(ctx: JobContext, payload: dict) -> None:
        if not healthy[0]:
            raise ConnectionError("carrier down")

    with TestEngine(app, lane_slots={"NORMAL": 1}) as t:
        first = [t.submit("sms.send", {"n": n}, tenant="acme") for n in range(2)]
        t.run_until_idle()
        waiting = t.submit("sms.send", {"n": 2}, tenant="acme")
        t.run_until_idle()
        assert [t.status(j.job_id).status for j in first] == ["dead", "dead"]
        assert t.status(waiting.job_id).status == "queued"  # held by the open breaker
        healthy[0] = True
        t.advance(seconds=30)
        assert t.status(waiting.job_id).status == "completed"
        assert [type(e.body).__name__ for e in t.events() if type(e.body).__name__.startswith("Breaker")] == \
            ["BreakerOpened", "BreakerHalfOpened", "BreakerClosed"]


def test_replay_reschedule_and_pausing_a_schedule() -> None:
    app, runs = App(), []

    @app.task("job", retry=RetryPolicy(max_attempts=1))
    def job(ctx: JobContext, payload: dict) -> None:
        runs.append(payload)
        if payload.get("fail") and len(runs) == 1:
            raise ConnectionError("once")

    with TestEngine(app, start=START) as t:
        dead = t.submit("job", {"fail": True}, tenant="acme")
        t.run_until_idle()
        assert t.status(dead.job_id).status == "dead"
        t.replay(dead.job_id, reason="fixed")
        t.run_until_idle()
        assert t.status(dead.job_id).status == "completed"

        later = t.submit("job", {"later": True}, tenant="acme", delay=3600)
        t.run_until_idle()
        assert t.reschedule(later.job_id, delay=60).accepted
        t.advance(minutes=1)
        assert t.status(later.job_id).status == "completed"

        assert t.add_schedule("hourly", "job", "0 * * * *", tenant="acme", payload={"s": 1}).accepted
        assert t.pause_schedule("hourly").accepted
        t.advance(hours=3)
        assert t.schedule("hourly") is not None and not t.schedule("hourly").enabled  # type: ignore[union-attr]
        assert {"s": 1} not in runs
        assert t.resume_schedule("hourly").accepted and t.remove_schedule("hourly").accepted
        assert t.schedules() == []


def test_tenant_limits_duplicates_and_a_global_job() -> None:
    app = App()

    @app.task("sync")
    def sync(ctx: JobContext, payload: dict) -> dict:
        return {"tenant": ctx.tenant}

    with TestEngine(app, weights={"a": 1.0, "b": 2.0}, max_queued={"c": 1}, lane_slots={"NORMAL": 0}) as t:
        first, second = t.submit("sync", {}, tenant="c"), t.submit("sync", {}, tenant="c")
        once, again = (t.submit("sync", {}, tenant="a", idempotency_key="k") for _ in range(2))
        t.run_until_idle()
        assert t.status(first.job_id).status == "queued"  # no slot: it waits
        assert (t.status(second.job_id).status, t.status(second.job_id).reason) == ("rejected", "tenant_queue_full")
        assert once.job_id == again.job_id and again.status().duplicate  # the second submit made no job
        assert not once.status().duplicate and not t.status(once.job_id).duplicate  # the job is no duplicate
    with TestEngine(app, weights={"a": 1.0, "b": 2.0}) as t:
        parent = t.submit("sync", {}, tenant="ops", scope="global")
        t.run_until_idle()
        outcome = t.status(parent.job_id)
    assert outcome.status == "completed" and sorted(outcome.children) == ["a", "b"]
    assert {child["status"] for child in outcome.children.values()} == {"completed"}


def test_the_memory_store_scans_like_rocksdb() -> None:
    from engine.testing.store import MemoryStore

    store = MemoryStore()
    store.commit({b"r:b": b"2", b"r:a": b"1", b"r:c": b"3", b"d:x": b"", b"j:1": b"job"}, 4)
    assert [k for k, _ in store.scan(b"r:")] == [b"r:a", b"r:b", b"r:c"]
    assert list(store.keys(b"r:", b"r:b")) == [b"r:b", b"r:c"] and list(store.scan(b"d:")) == [(b"d:x", b"")]
    store.commit({b"r:b": None, b"r:d": b"4", b"d:x": None}, 5)
    assert [k for k, _ in store.scan(b"r:")] == [b"r:a", b"r:c", b"r:d"] and list(store.scan(b"d:")) == []
    assert store.applied_offset() == 5 and store.get(b"j:1") == b"job" and store.get(b"r:b") is None
    assert [k for k, _ in store.items()] == [b"j:1", b"r:a", b"r:c", b"r:d"]


def test_an_async_handler_runs_while_the_test_itself_runs_an_event_loop() -> None:
    import asyncio

    app = App()

    @app.task("ping")
    async def ping(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"pong": payload["n"]}

    async def a_test_on_a_loop() -> str:
        with TestEngine(app) as t:
            job = t.submit("ping", {"n": 1}, tenant="acme")
            t.run_until_idle()
            return t.status(job.job_id).status

    with ThreadPoolExecutor(1) as pool:  # a thread of its own: the suite's browser tests keep a loop on this one
        assert pool.submit(asyncio.run, a_test_on_a_loop()).result() == "completed"


def test_records_a_handler_produces_are_kept_only_with_its_success() -> None:
    app = App()

    @app.task("invoice", retry=RetryPolicy(max_attempts=2, base_delay=1.0))
    def invoice(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.produce("billing.invoices", f"{ctx.job_id}/{ctx.attempt}", key=ctx.job_id)
        if ctx.attempt == 1:
            raise ConnectionError("ledger down")

    with TestEngine(app, start=START) as t:
        job = t.submit("invoice", {}, tenant="acme")
        t.advance(minutes=1)
        assert t.status(job.job_id).status == "completed"
        produced = t.produced("billing.invoices")
    assert [(r.key, r.value) for r in produced] == [(job.job_id.encode(), f"{job.job_id}/2".encode())]
def test_a_fan_in_then_a_chain_each_handler_reading_the_results_it_waited_for() -> None:
    seen: dict[str, dict[str, Any]] = {}
    app = App()

    @app.task("part")
    def part(ctx: JobContext, payload: dict) -> int:
        if payload["n"] < 0:
            raise ValueError("negative")
        return int(payload["n"]) * 10

    @app.task("total")
    def total(ctx: JobContext, payload: dict) -> int:
        seen[ctx.job_id] = ctx.dependency_results
        return sum(v for v in ctx.dependency_results.values() if isinstance(v, int))

    with TestEngine(app) as t:
        parts = [t.submit("part", {"n": n}, tenant="acme", max_attempts=1) for n in (1, 2, 3, -1)]
        both = t.submit("total", {}, tenant="acme", depends_on=parts, if_dependency_fails="run")
        strict = t.submit("total", {}, tenant="acme", depends_on=[p.job_id for p in parts])
        after = t.submit("total", {}, tenant="acme", depends_on=[both])
        t.run_until_idle()
        assert t.status(both.job_id).result == 60 and t.status(after.job_id).result == 60
        outcome = t.status(strict.job_id)
        assert outcome.status == "cancelled" and outcome.reason is not None
        assert outcome.reason.startswith(f"dependency_failed: job {parts[3].job_id} is dead (ValueError: negative")
        assert outcome.dependencies[parts[3].job_id] == "dead"
        assert t.status(both.job_id).dependents == [after.job_id]  # it waited for both; the parts ended first
        assert "DependenciesAwaited" in types(t.history(both.job_id))
    assert seen[both.job_id] == {parts[0].job_id: 10, parts[1].job_id: 20, parts[2].job_id: 30,
                                 parts[3].job_id: {"status": "dead", "error": "ValueError: negative"}}
    assert seen[after.job_id] == {both.job_id: 60} and strict.job_id not in seen


def test_the_submitter_s_traceparent_reaches_the_handler_as_the_engine_passes_it() -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    calls: list[JobContext] = []
    parent = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1))
    with TestEngine(flaky_app(1, calls), start=START) as t:
        with trace.use_span(NonRecordingSpan(parent)):  # a submitter's current span (no SDK needed to carry one)
            job = t.submit("payment.capture", {"amount": 3}, tenant="acme")
        untraced = t.submit("payment.capture", {"amount": 4}, tenant="acme")
        t.advance(hours=2)
        assert t.status(job.job_id).status == "completed"
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert [(c.attempt, c.traceparent) for c in calls if c.job_id == job.job_id] == [(1, traceparent),
                                                                                     (2, traceparent)]
    assert {c.traceparent for c in calls if c.job_id == untraced.job_id} == {None}


def test_a_handler_cannot_produce_to_a_topic_of_the_engine_s_namespace() -> None:
    app = App()

    @app.task("forward")
    def forward(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.produce(payload["topic"], b"forged")

    with TestEngine(app, start=START, namespace="shop") as t:
        refused = t.submit("forward", {"topic": "shop.events"}, tenant="acme")
        allowed = t.submit("forward", {"topic": "epochq.events"}, tenant="acme")  # another namespace's name
        t.run_until_idle()
        assert t.status(refused.job_id).status == "dead"
        assert "topic shop.events is a topic of namespace shop" in (t.status(refused.job_id).error or "")
        assert t.status(allowed.job_id).status == "completed"
        assert t.produced("shop.events") == []
