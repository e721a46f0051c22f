"""Running handlers: payloads in, outcomes out, lanes, timeouts, hooks, processes, shutdown."""

from __future__ import annotations

import json
import logging
import os
import pickle
import threading
import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pydantic import BaseModel

from engine.app import App
from engine.contract.messages import Payload
from engine.domain.lanes import Lane
from engine.errors import ConfigError, IllegalStateError, ValidationError
from engine.runtime.execution.context import JobContext
from engine.runtime.execution.executor import Executor, AttemptOutcome, RunRequest, RunResult
from engine.contract.validation import MAX_RESULT_BYTES
from engine.runtime.execution.payloads import decode_payload, encode_result, load_payload

SLOTS = {Lane.HIGH: 2, Lane.NORMAL: 2, Lane.LOW: 1, Lane.BATCH: 1}


class Email(BaseModel):
    to: str
    retries: int = 0


class Order(BaseModel):
    email: Email
    qty: int


def json_payload(value: Any) -> Payload:
    return Payload(json.dumps(value).encode())


def request(task_type: str, payload: Payload | None = None, *, lane: Lane = Lane.NORMAL,
            job_id: str = "job-1", partition: int = 0, deadline_in: float = 10.0) -> RunRequest:
    return RunRequest(
        partition=partition, epoch=3, job_id=job_id, tenant="acme", task_type=task_type, attempt=2,
        lane=lane, payload=payload or json_payload({"to": "a@b.c"}), idempotency_key="k",
        deadline=time.time() + deadline_in, queued_at_us=0,
    )


def run_one(executor: Executor, req: RunRequest, wait: float = 5.0) -> AttemptOutcome:
    executor.submit(req)
    results = executor.wait_results(wait)
    assert [r.request for r in results] == [req]
    return results[0].outcome


# --- handlers: module level, so a child process can import them -----------------------------


def pid_and_sum(ctx: JobContext, payload: dict[str, int]) -> dict[str, int]:
    return {"pid": os.getpid(), "sum": sum(range(payload["n"])), "attempt": ctx.attempt}


class ProcessHandler:
    def validate(self, payload: Email) -> Email:
        return payload.model_copy(update={"retries": 7})

    def execute(self, ctx: JobContext, payload: Email) -> dict[str, Any]:
        return {"pid": os.getpid(), "retries": payload.retries}


class Recorder:
    """A class handler that writes down every hook call."""

    def __init__(self, fail: BaseException | None = None, after_fails: bool = False) -> None:
        self.calls: list[str] = []
        self.outcomes: list[AttemptOutcome] = []
        self.fail = fail
        self.after_fails = after_fails

    def validate(self, payload: Email) -> Email:
        self.calls.append("validate")
        return payload.model_copy(update={"retries": 1})

    def before_execute(self, ctx: JobContext, payload: Email) -> None:
        self.calls.append("before_execute")

    def execute(self, ctx: JobContext, payload: Email) -> dict[str, Any]:
        self.calls.append("execute")
        if self.fail is not None:
            raise self.fail
        return {"to": payload.to, "retries": payload.retries}

    def after_execute(self, ctx: JobContext, payload: Email, outcome: AttemptOutcome) -> None:
        self.calls.append(f"after_execute:{outcome.kind}")
        self.outcomes.append(outcome)
        if self.after_fails:
            raise RuntimeError("after hook broke")


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """An event blocked handlers wait on; set at teardown so no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def app(gate: threading.Event) -> App:
    app = App()
    app.register("ok", lambda ctx, payload: {"sent": True, "to": payload["to"]})
    app.register("none", lambda ctx, payload: None)
    app.register("typed", lambda ctx, payload: payload, model=Email)
    app.register("boom", _boom)
    app.register("refuse", _refuse)
    app.register("blocked", lambda ctx, payload: gate.wait(5) and {"late": True}, timeout=0.1)
    app.register("slow", lambda ctx, payload: time.sleep(0.15), timeout=0.05)
    app.register("hold", lambda ctx, payload: gate.wait(5) and "done")
    app.register("ctx", lambda ctx, payload: ctx.fields())
    app.register("unencodable", lambda ctx, payload: {"x": float("nan")})
    app.register("huge", lambda ctx, payload: "x" * (MAX_RESULT_BYTES + 1))
    return app


@pytest.fixture
def executor(app: App, gate: threading.Event) -> Iterator[Executor]:
    ex = Executor(app, SLOTS)
    yield ex
    gate.set()
    ex.shutdown(1.0)


def _boom(ctx: JobContext, payload: Any) -> None:
    def inner(depth: int) -> None:
        if depth == 0:
            raise RuntimeError("boom: smtp down")
        inner(depth - 1)

    inner(30)


def _refuse(ctx: JobContext, payload: Any) -> None:
    raise ValidationError("recipient is on the block list")


# --- payloads -----------------------------------------------------------------------------


def test_payloads_decode_by_content_type() -> None:
    assert decode_payload(Payload(b'{"a": [1]}')) == {"a": [1]}
    assert decode_payload(Payload(b'{"a": 1}', "application/json; charset=utf-8")) == {"a": 1}
    assert decode_payload(Payload("héllo".encode(), "text/plain")) == "héllo"
    assert decode_payload(Payload(b"\x00\xff", "application/octet-stream")) == b"\x00\xff"


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        (Payload(b"{not json"), "not valid JSON"),
        (Payload(b'{"a":' * 100_000 + b"1" + b"}" * 100_000), "payload: JSON nested too deeply"),
        (Payload(b"\xff", "text/plain"), "not valid UTF-8"),
        (Payload(b"<a/>", "application/xml"), "'application/xml'"),
    ],
)
def test_undecodable_payloads_are_validation_errors(payload: Payload, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        decode_payload(payload, "t")


def test_model_failures_name_every_failing_field() -> None:
    with pytest.raises(ValidationError) as info:
        load_payload(json_payload({"email": {"retries": "x"}, "qty": "many"}), Order, "orders.place")
    text = str(info.value)
    assert "'orders.place'" in text and "Order" in text
    assert "email.to: Field required" in text
    assert "email.retries:" in text and "qty:" in text
    assert load_payload(json_payload({"to": "a"}), Email) == Email(to="a")


def test_results_encode_to_sorted_json_or_model_json() -> None:
    assert encode_result(None) is None
    assert encode_result({"b": 1, "a": [Email(to="x")]}) == b'{"a":[{"retries":0,"to":"x"}],"b":1}'
    assert encode_result(Email(to="x")) == Email(to="x").model_dump_json().encode()
    assert encode_result({"when": Lane.HIGH}) == b'{"when":"HIGH"}'
    assert encode_result({"name": "Zoë 東京"}) == '{"name":"Zoë 東京"}'.encode()  # UTF-8, not \u escapes
    assert encode_result({"odd": "\ud800"}) == b'{"odd":"\\ud800"}'  # a lone surrogate has no UTF-8: escaped
    for bad in ({"x": float("inf")}, {1: "a", "b": 2}):
        with pytest.raises(ValidationError, match="not JSON-encodable"):
            encode_result(bad)


# --- context -----------------------------------------------------------------------------


def test_context_names_the_job_in_logs_and_survives_pickling(caplog: pytest.LogCaptureFixture) -> None:
    ctx = JobContext.create(job_id="j1", tenant="acme", task_type="email.send", attempt=2, epoch=7,
                            partition=3, idempotency_key=None, deadline=time.time() + 5)
    assert 4.0 < ctx.remaining() <= 5.0
    with caplog.at_level(logging.INFO, logger="epochq.handler.email.send"):
        ctx.logger.info("sending")
    record = caplog.records[-1]
    assert (record.job_id, record.tenant, record.epoch, record.partition, record.attempt) == (  # type: ignore[attr-defined]
        "j1", "acme", 7, 3, 2)
    assert "job_id=j1" in record.getMessage()
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy == ctx and copy.logger.extra == ctx.logger.extra


# --- outcomes ----------------------------------------------------------------------------


def test_success_carries_the_result_bytes(executor: Executor) -> None:
    outcome = run_one(executor, request("ok"))
    assert outcome.kind == "succeeded" and outcome.result == b'{"sent":true,"to":"a@b.c"}'
    assert outcome.duration_us >= 0 and not outcome.error_type
    assert run_one(executor, request("none")).result is None
    assert executor.free_slots(Lane.NORMAL) == 2 and executor.in_flight() == 0


def test_the_handler_gets_the_context_of_its_request(executor: Executor) -> None:
    req = request("ctx", partition=5)
    fields = json.loads(run_one(executor, req).result or b"")
    assert fields["job_id"] == "job-1" and fields["tenant"] == "acme"
    assert (fields["attempt"], fields["epoch"], fields["partition"], fields["idempotency_key"]) == (2, 3, 5, "k")
    assert fields["deadline"] <= req.deadline


def test_an_exception_fails_the_attempt_with_a_short_traceback(executor: Executor) -> None:
    outcome = run_one(executor, request("boom"))
    assert (outcome.kind, outcome.error_type, outcome.retryable) == ("failed", "RuntimeError", True)
    assert outcome.message == "boom: smtp down"
    assert outcome.traceback.endswith("RuntimeError: boom: smtp down\n")
    assert outcome.traceback.count('File "') == 3 and "in inner" in outcome.traceback
    assert len(outcome.traceback) <= 2000


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        (request("typed", json_payload({"retries": 1})), "to: Field required"),
        (request("ok", Payload(b"{oops")), "not valid JSON"),
        (request("ok", Payload(b"[" * 100_000 + b"]" * 100_000)), "nested too deeply"),
        (request("ok", Payload(b"x", "image/png")), "image/png"),
        (request("refuse"), "block list"),
        (request("no.such.task"), "unknown task type 'no.such.task'"),
    ],
)
def test_validation_failures_are_invalid_and_not_retryable(executor: Executor, req: RunRequest, needle: str) -> None:
    req = dataclasses.replace(req, deadline=time.time() + 10.0)  # built at collection time: refresh it
    outcome = run_one(executor, req)
    assert (outcome.kind, outcome.retryable) == ("invalid", False)
    assert needle in outcome.message


def test_an_unencodable_result_dead_letters_at_once(executor: Executor) -> None:
    outcome = run_one(executor, request("unencodable"))  # the same handler would return it again: never retried
    assert (outcome.kind, outcome.error_type, outcome.retryable) == ("invalid", "ValidationError", False)
    assert "not JSON-encodable" in outcome.message


def test_a_result_too_large_for_its_event_dead_letters_at_once(executor: Executor) -> None:
    outcome = run_one(executor, request("huge"))
    assert (outcome.kind, outcome.error_type, outcome.retryable) == ("invalid", "ValidationError", False)
    assert outcome.message.startswith("result: the handler returned 524,291 bytes; a result is at most 524,288")


def test_a_timeout_fails_once_frees_the_slot_and_drops_the_late_result(
    executor: Executor, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    outcome = run_one(executor, request("blocked"), wait=2.0)
    assert (outcome.kind, outcome.error_type, outcome.retryable) == ("failed", "TimeoutError", True)
    assert outcome.duration_us >= 90_000
    assert executor.free_slots(Lane.NORMAL) == 2 and executor.in_flight() == 0
    gate.set()
    with caplog.at_level(logging.INFO, logger="engine.runtime.execution.executor"):
        assert executor.wait_results(0.3) == []
    assert "discarded the late result" in caplog.text  # {"late": true} came, and was dropped


def test_a_result_that_finished_after_its_deadline_is_a_timeout(executor: Executor) -> None:
    executor.submit(request("slow"))
    time.sleep(0.3)  # no poll until the handler has long returned
    results = executor.poll_results()
    assert [r.outcome.error_type for r in results] == ["TimeoutError"]
    assert executor.poll_results() == []


def test_stuck_threads_beyond_the_spare_ones_shrink_the_lane(executor: Executor) -> None:
    for i in range(2):  # LOW has 1 slot and 1 spare thread
        outcome = run_one(executor, request("blocked", lane=Lane.LOW, job_id=f"j{i}"), wait=2.0)
        assert outcome.error_type == "TimeoutError"
    assert executor.free_slots(Lane.LOW) == 0


def test_a_full_batch_lane_does_not_block_high(executor: Executor) -> None:
    held = request("hold", lane=Lane.BATCH, job_id="bulk")
    executor.submit(held)
    assert executor.free_slots(Lane.BATCH) == 0
    with pytest.raises(IllegalStateError, match="BATCH has no free slot"):
        executor.submit(request("hold", lane=Lane.BATCH, job_id="bulk-2"))
    assert run_one(executor, request("ok", lane=Lane.HIGH, job_id="otp")).kind == "succeeded"
    assert executor.in_flight_requests(0) == [held]


def test_lanes_without_slots_take_nothing(app: App) -> None:
    ex = Executor(app, {Lane.HIGH: 1})
    assert ex.free_slots(Lane.BATCH) == 0 and ex.free_slots(Lane.DEAD) == 0
    with pytest.raises(IllegalStateError, match="no free slot"):
        ex.submit(request("ok", lane=Lane.LOW))
    ex.shutdown(0)
    with pytest.raises(ConfigError, match="lane_slots"):
        Executor(app, {Lane.LOW: -1})
    with pytest.raises(ConfigError, match="DEAD"):
        Executor(app, {Lane.DEAD: 1})


def test_in_flight_counts_by_partition_and_poll_respects_max_items(executor: Executor) -> None:
    executor.submit(request("hold", partition=1, job_id="a"))
    executor.submit(request("ok", lane=Lane.HIGH, partition=2, job_id="b"))
    executor.submit(request("ok", lane=Lane.HIGH, partition=2, job_id="c"))
    assert executor.in_flight(1) == 1 and executor.in_flight() in (2, 3)
    assert [r.job_id for r in executor.in_flight_requests(1)] == ["a"]
    time.sleep(0.1)
    assert len(executor.poll_results(max_items=1)) == 1
    assert len(executor.poll_results()) == 1
    assert executor.in_flight() == 1


# --- class handlers ----------------------------------------------------------------------


def run_with(handler: Recorder, req_payload: Payload | None = None) -> AttemptOutcome:
    app = App()
    app.register("rec", handler)
    ex = Executor(app, {Lane.NORMAL: 1})
    try:
        return run_one(ex, request("rec", req_payload))
    finally:
        ex.shutdown(1.0)


def test_class_hooks_run_in_order() -> None:
    handler = Recorder()
    outcome = run_with(handler)
    assert handler.calls == ["validate", "before_execute", "execute", "after_execute:succeeded"]
    assert json.loads(outcome.result or b"") == {"to": "a@b.c", "retries": 1}
    assert handler.outcomes == [outcome]


def test_after_execute_sees_failures_and_cannot_change_the_outcome(caplog: pytest.LogCaptureFixture) -> None:
    failing = Recorder(fail=KeyError("gone"))
    assert run_with(failing).error_type == "KeyError"
    assert failing.calls[-1] == "after_execute:failed"
    broken_after = Recorder(after_fails=True)
    with caplog.at_level(logging.ERROR, logger="epochq.handler.rec"):
        assert run_with(broken_after).kind == "succeeded"
    assert "after_execute raised" in caplog.text and "job_id=job-1" in caplog.text


def test_an_invalid_payload_never_reaches_the_hooks() -> None:
    handler = Recorder()
    assert run_with(handler, json_payload({"nope": 1})).kind == "invalid"
    assert handler.calls == []


# --- process pool and shutdown -----------------------------------------------------------


def test_process_tasks_run_in_another_process_and_hold_a_lane_slot() -> None:
    app = App()
    app.register("cpu", pid_and_sum, executor="process", timeout=30)
    app.register("cpu.class", ProcessHandler, executor="process", timeout=30)
    ex = Executor(app, {Lane.BATCH: 2}, process_workers=1)
    try:
        ex.submit(request("cpu", json_payload({"n": 1000}), lane=Lane.BATCH, job_id="a"))
        ex.submit(request("cpu.class", lane=Lane.BATCH, job_id="b"))
        assert ex.free_slots(Lane.BATCH) == 0
        results = _collect(ex, 2, 30.0)
    finally:
        ex.shutdown(1.0)
    by_job = {r.request.job_id: json.loads(r.outcome.result or b"") for r in results}
    assert by_job["a"]["sum"] == sum(range(1000)) and by_job["a"]["attempt"] == 2
    assert by_job["a"]["pid"] != os.getpid() and by_job["b"]["pid"] != os.getpid()
    assert by_job["b"]["retries"] == 7  # validate ran in the child


def _collect(ex: Executor, n: int, timeout: float) -> list[RunResult]:
    results: list[RunResult] = []
    end = time.monotonic() + timeout
    while len(results) < n and time.monotonic() < end:
        results += ex.wait_results(end - time.monotonic())
    return results


def test_shutdown_waits_for_running_work_within_the_grace(executor: Executor, gate: threading.Event) -> None:
    executor.submit(request("hold", job_id="finishes"))
    threading.Timer(0.05, gate.set).start()
    results = executor.shutdown(2.0)
    assert [(r.request.job_id, r.outcome.result) for r in results] == [("finishes", b'"done"')]
    with pytest.raises(IllegalStateError, match="shut down"):
        executor.submit(request("ok"))


def test_shutdown_leaves_unfinished_work_listed(executor: Executor) -> None:
    held = request("hold", job_id="stays")
    executor.submit(held)
    assert executor.shutdown(0.1) == []  # had it waited for the handler (5 s on its gate), its result would be here
    assert executor.in_flight_requests(0) == [held]


# --- async handlers: tasks on the executor's event loop -------------------------------------


async def _async_ok(ctx: JobContext, payload: Any) -> dict:
    return {"async": True, "thread": threading.current_thread().name, "attempt": ctx.attempt}


async def _async_boom(ctx: JobContext, payload: Any) -> None:
    raise ConnectionError("downstream said no")


async def _async_slow(ctx: JobContext, payload: Any) -> dict:
    import asyncio

    await asyncio.sleep(5)
    return {"late": True}


def test_async_handlers_run_on_the_event_loop_and_report_like_threads() -> None:
    app = App()
    app.register("aok", _async_ok)
    app.register("aboom", _async_boom)
    app.register("aslow", _async_slow, timeout=0.1)
    ex = Executor(app, SLOTS)
    try:
        ex.submit_many([request("aok", job_id="j1"), request("aboom", job_id="j2"),
                        request("aslow", job_id="j3", lane=Lane.HIGH)])
        got: dict[str, RunResult] = {}
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            got.update((r.request.job_id, r) for r in ex.wait_results(0.5))
        ok, boom, slow = got["j1"].outcome, got["j2"].outcome, got["j3"].outcome
        assert ok.kind == "succeeded" and json.loads(ok.result)["thread"] == "epochq-async"  # type: ignore[arg-type]
        assert boom.kind == "failed" and boom.error_type == "ConnectionError" and boom.retryable
        assert slow.kind == "failed" and slow.error_type == "TimeoutError"  # its task was cancelled
        assert ex.free_slots(Lane.NORMAL) == SLOTS[Lane.NORMAL]
    finally:
        ex.shutdown(1.0)


def test_an_async_handler_cannot_ask_for_a_process() -> None:
    with pytest.raises(ValueError, match="event loop"):
        App().register("aok", _async_ok, executor="process")


# --- cancelling a running attempt ------------------------------------------------------------


BEGAN = threading.Event()
"""Set by the cancel tests' handlers once they run: a cancel is asked for a running attempt, never a queued one."""


def _cooperative(ctx: JobContext, payload: Any) -> str:
    BEGAN.set()
    for _ in range(200):
        ctx.raise_if_cancelled()
        time.sleep(0.01)
    return "finished"


def _sleeper(ctx: JobContext, payload: Any) -> str:
    BEGAN.set()
    return "woken" if ctx.sleep(5) else "slept"


def _stubborn(ctx: JobContext, payload: Any) -> str:
    BEGAN.set()
    time.sleep(1.0)  # never looks at ctx.cancelled
    return "ignored the cancel"


async def _async_waiter(ctx: JobContext, payload: Any) -> str:
    import asyncio

    BEGAN.set()
    await asyncio.sleep(5)
    return "finished"


@contextmanager
def cancelled_once_begun(task: str, handler: Any) -> Iterator[tuple[Executor, RunResult]]:
    """An executor running ``handler`` as ``task``, asked to cancel the attempt once it began (with a 0.4 s grace):
    the executor and the attempt's one result, read within 2 s. The executor is shut down afterwards."""
    app = App()
    app.register(task, handler)
    ex = Executor(app, SLOTS)
    req = request(task)
    try:
        BEGAN.clear()
        ex.submit(req)
        assert BEGAN.wait(10), "the handler never started"
        assert ex.cancel(req.job_id, req.attempt, grace_s=0.4)
        assert not ex.cancel(req.job_id, req.attempt + 1, grace_s=0.4)  # not the attempt that runs
        (result,) = ex.wait_results(2.0)
        yield ex, result
    finally:
        ex.shutdown(1.0)


@pytest.mark.parametrize(("handler", "error_type"), [(_cooperative, "Cancelled"), (_async_waiter, "CancelledError")],
                         ids=["cooperative", "async"])
def test_a_cancelled_attempt_that_stops_is_cancelled(handler: Any, error_type: str) -> None:
    with cancelled_once_begun("stops", handler) as (ex, result):
        assert (result.outcome.kind, result.outcome.error_type, result.outcome.retryable) == (
            "cancelled", error_type, False)
        assert "cancel grace" not in result.outcome.message  # it stopped when asked, not given up at the grace's end
        assert ex.free_slots(Lane.NORMAL) == SLOTS[Lane.NORMAL]


def test_ctx_sleep_wakes_on_a_cancel_and_a_result_still_counts() -> None:
    with cancelled_once_begun("sleeper", _sleeper) as (_, result):
        assert result.outcome.kind == "succeeded" and json.loads(result.outcome.result or b"") == "woken"


def test_an_attempt_that_ignores_a_cancel_is_given_up_after_the_grace() -> None:
    with cancelled_once_begun("stubborn", _stubborn) as (ex, result):
        assert result.outcome.kind == "cancelled" and "cancel grace" in result.outcome.message
        assert ex.in_flight() == 0
        assert ex.wait_results(1.2) == []  # its late "ignored the cancel" is discarded


def test_a_cancel_flag_is_per_attempt_and_not_pickled() -> None:
    cancels = {7}
    ctx = JobContext("j", "t", "x", 1, 1, 0, None, 0.0, None, 7, cancels)
    assert ctx.cancelled and not pickle.loads(pickle.dumps(ctx)).cancelled
    with pytest.raises(Exception, match="asked to stop"):
        ctx.raise_if_cancelled()
    cancels.clear()
    assert not ctx.cancelled and ctx.sleep(0.01) is False


def _reporting(ctx: JobContext, payload: Any) -> str:
    for n in range(1, 4):
        ctx.progress(n / 4, f"step {n}")
    with pytest.raises(ValidationError, match="finite"):
        ctx.progress(float("nan"))
    time.sleep(0.5)
    return "done"


def test_the_latest_progress_of_a_running_attempt_is_taken_at_most_every_interval() -> None:
    app = App()
    app.register("reporting", _reporting)
    ex = Executor(app, SLOTS)
    try:
        req = request("reporting")
        ex.submit(req)
        time.sleep(0.2)
        assert ex.take_progress(every_s=0.0) == [(req, 0.75, "step 3")]
        assert ex.take_progress(every_s=0.0) == []  # nothing new since
        assert ex.wait_results(2.0)[0].outcome.kind == "succeeded"
    finally:
        ex.shutdown(1.0)
