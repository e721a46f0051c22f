"""ctx.produce and ctx.fencing_token: what an attempt keeps, what it hands the owner, and what is refused."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from typing import Any

import pytest

from engine.app import App
from engine.contract import messages as m
from engine.contract.messages import Payload
from engine.domain.lanes import Lane
from engine.errors import OutputRefusedError, ValidationError
from engine.runtime.execution.context import JobContext, fencing_token
from engine.runtime.execution.executor import Executor, RunRequest, RunResult
from engine.runtime.execution.outputs import MAX_OUTPUT_BYTES, OutputRecord, output_record
from engine.runtime.execution.verdicts import AttemptOutcome, AttemptOutcomeKind
from engine.runtime.loop import effects
from engine.runtime.loop.draft import Staged


def request(task_type: str, job_id: str = "job-1", attempt: int = 2) -> RunRequest:
    return RunRequest(partition=0, epoch=3, job_id=job_id, tenant="acme", task_type=task_type, attempt=attempt,
                      lane=Lane.NORMAL, payload=Payload(json.dumps({}).encode()), idempotency_key=None,
                      deadline=time.time() + 10, queued_at_us=0)


class Gate:
    """A topic gate that refuses the topics it is told to."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.asked: list[str] = []

    def check(self, record: OutputRecord) -> None:
        self.asked.append(record.topic)
        if record.topic in self.refused:
            raise OutputRefusedError(f"ctx.produce: topic {record.topic} does not exist")


def run(app: App, req: RunRequest, gate: Gate | None = None) -> AttemptOutcome:
    executor = Executor(app, {Lane.NORMAL: 2}, gate=gate)
    try:
        executor.submit(req)
        results = executor.wait_results(5)
        assert len(results) == 1
        return results[0].outcome
    finally:
        executor.shutdown(1)


def producing_app() -> App:
    app = App()

    @app.task("emit")
    def emit(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.produce("out", "one", key="k", headers={"h": "v"})
        ctx.produce("out", b"two")

    @app.task("emit.fail")
    def emit_fail(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.produce("out", "lost")
        raise RuntimeError("after producing")

    @app.task("emit.async")
    async def emit_async(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        ctx.produce("out", "async")

    @app.task("emit.refused")
    def emit_refused(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.produce("nowhere", "x")

    @app.task("plain")
    def plain(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None
    return app


def test_a_success_carries_its_records_in_order() -> None:
    outcome = run(producing_app(), request("emit"))
    assert outcome.kind is AttemptOutcomeKind.SUCCEEDED
    assert outcome.records == (OutputRecord("out", b"one", b"k", (("h", b"v"),)), OutputRecord("out", b"two"))


def test_an_async_success_carries_its_records() -> None:
    assert run(producing_app(), request("emit.async")).records == (OutputRecord("out", b"async"),)


def test_a_failure_carries_none() -> None:
    outcome = run(producing_app(), request("emit.fail"))
    assert outcome.kind is AttemptOutcomeKind.FAILED and outcome.records == ()


def test_a_refused_topic_fails_the_attempt_with_the_gate_s_reason() -> None:
    gate = Gate({"nowhere"})
    outcome = run(producing_app(), request("emit.refused"), gate)
    assert outcome.kind is AttemptOutcomeKind.FAILED and outcome.retryable
    assert outcome.error_type == "OutputRefusedError" and "nowhere does not exist" in outcome.message
    assert gate.asked == ["nowhere"]


def test_a_job_that_produces_nothing_has_no_record_list() -> None:
    outcome = run(producing_app(), request("plain"))
    assert outcome.records == ()


def test_records_are_checked_for_name_size_and_types() -> None:
    with pytest.raises(OutputRefusedError, match="not a Kafka topic name"):
        output_record("bad topic", b"x", None, None)
    with pytest.raises(ValidationError, match="fit in one Kafka record"):
        output_record("out", b"x" * (MAX_OUTPUT_BYTES + 1), None, None)
    with pytest.raises(ValidationError, match="value must be bytes, str or None"):
        output_record("out", 42, None, None)  # type: ignore[arg-type]
    assert output_record("out", None, "k", [("h", None)]) == OutputRecord("out", None, b"k", (("h", None),))


def test_the_fencing_token_grows_with_the_epoch_then_the_attempt() -> None:
    tokens = [fencing_token(1, 1), fencing_token(1, 2), fencing_token(1, 40), fencing_token(2, 1),
              fencing_token(2, 3), fencing_token(10, 1)]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    ctx = JobContext.create(job_id="j", tenant="t", task_type="x", attempt=3, epoch=7, partition=0,
                            idempotency_key=None, deadline=0.0)
    assert ctx.fencing_token == (7 << 32) | 3


def test_a_replayed_job_s_tokens_stay_above_those_before_its_replay() -> None:
    before = [fencing_token(7, a) for a in (1, 2, 1000)]  # a job that ran out of attempts
    after = [fencing_token(7, a, replays=1) for a in (1, 2, 1000)]  # replayed: attempts count from 1 again
    again = [fencing_token(7, 1, replays=2), fencing_token(8, 1)]
    tokens = before + after + again
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    ctx = JobContext.create(job_id="j", tenant="t", task_type="x", attempt=1, epoch=7, partition=0,
                            idempotency_key=None, deadline=0.0, replays=1, traceparent="00-ab-cd-01")
    assert ctx.fencing_token == (7 << 32) | (1 << 16) | 1
    rebuilt = pickle.loads(pickle.dumps(ctx))  # into a process-pool worker: the token and the trace go along
    assert (rebuilt.fencing_token, rebuilt.traceparent) == (ctx.fencing_token, "00-ab-cd-01")


def test_a_handler_replayed_from_the_dead_letter_queue_gets_a_higher_token() -> None:
    from engine import RetryPolicy
    from engine.testing import TestEngine

    app, tokens = App(), []

    @app.task("ledger.write", retry=RetryPolicy(max_attempts=2, base_delay=0.0, jitter=0.0))
    def write(ctx: JobContext, payload: dict) -> None:
        tokens.append(ctx.fencing_token)
        if len(tokens) <= 2:
            raise ConnectionError("ledger down")

    with TestEngine(app) as t:
        job = t.submit("ledger.write", {}, tenant="acme")
        t.advance(seconds=1)
        assert t.status(job.job_id).status == "dead"
        t.replay(job.job_id)
        t.advance(seconds=1)
        assert t.status(job.job_id).status == "completed"
    assert len(tokens) == 3 and tokens == sorted(tokens) and len(set(tokens)) == 3


def succeeded_event(job_id: str) -> m.Event:
    return m.Event("e", job_id, "acme", 3, "a", 0, m.JobSucceeded(2, 10, None))


def test_records_are_staged_only_with_the_job_s_success() -> None:
    staged = Staged()
    records = (OutputRecord("out", b"v"),)
    result = RunResult(request("emit"), AttemptOutcome(AttemptOutcomeKind.SUCCEEDED, records=records))
    effects.stage(staged, result, [])  # a stale result: nothing decided
    assert staged.outputs == []
    effects.stage(staged, result, [succeeded_event("job-1")])
    assert staged.outputs == [effects.Output("job-1", 2, records)]


def test_undo_forgets_the_outputs_an_input_staged() -> None:
    staged = Staged()
    staged.outputs.append(effects.Output("a", 1, ()))
    mark = staged.mark()
    staged.outputs.append(effects.Output("b", 1, ()))
    staged.undo(mark)
    assert [o.job_id for o in staged.outputs] == ["a"]


class Refused:
    def __init__(self, staged: Staged, refused: dict[tuple[str, int], str], error: Exception | None = None) -> None:
        self.staged, self.refused, self.error = staged, refused, error


def refused_pair() -> tuple[Staged, RunResult, RunResult]:
    staged = Staged()
    succeeded = AttemptOutcomeKind.SUCCEEDED
    ok = RunResult(request("emit", "ok"), AttemptOutcome(succeeded, records=(OutputRecord("o", b"1"),)))
    bad = RunResult(request("emit", "bad"), AttemptOutcome(succeeded, records=(OutputRecord("s", b"2"),)))
    staged.results = [ok, bad]
    return staged, ok, bad


def test_a_refused_record_turns_its_attempt_into_a_retryable_failure_and_no_other() -> None:
    staged, ok, bad = refused_pair()
    assert effects.refused_results(Refused(staged, {})) is None  # type: ignore[arg-type]
    results = effects.refused_results(Refused(staged, {("bad", 2): "s: MSG_SIZE_TOO_LARGE"}))  # type: ignore[arg-type]
    assert results is not None and results[0] is ok
    assert staged.results == [ok, bad]  # data: the staged results are left as they are
    failed = results[1].outcome
    assert failed.kind is AttemptOutcomeKind.FAILED and failed.retryable and failed.records == ()
    assert failed.error_type == "OutputRefusedError" and "MSG_SIZE_TOO_LARGE" in failed.message


def test_the_apply_step_resyncs_a_transaction_refused_over_a_handler_s_record_with_its_attempt_failed() -> None:
    from engine.errors import AccessDeniedError
    from engine.runtime.loop.apply import Next, Verdict, next_step
    from engine.runtime.loop.partition import State

    staged, ok, _ = refused_pair()
    staged.first_command_offset = 7
    denied = AccessDeniedError("topic s: not authorized")
    step = next_step(Refused(staged, {("bad", 2): "s: TOPIC_AUTHORIZATION_FAILED"}, denied),  # type: ignore[arg-type]
                    Verdict.REFUSED, State.ACTIVE)
    assert step.verdict is Verdict.ABORTED and step.next is Next.RESYNC and step.keep_results and step.rewind == 7
    assert step.results is not None and step.results[0] is ok
    assert step.results[1].outcome.error_type == "OutputRefusedError"
    plain = next_step(Refused(staged, {}, denied), Verdict.REFUSED, State.ACTIVE)  # type: ignore[arg-type]
    assert plain.next is Next.BACK_OFF and plain.results is None  # the partition's own writes: back off


def test_the_trace_id_of_a_traceparent_and_the_console_s_job_page_line() -> None:
    from types import SimpleNamespace

    from engine.console.jobpage import _trace_id
    from engine.questions.traces import trace_id

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_id(parent) == "0af7651916cd43dd8448eb211c80319c"
    assert trace_id(None) is None and trace_id("garbage") is None
    assert trace_id("00-00000000000000000000000000000000-b7ad6b7169203331-01") is None  # the invalid all-zero id
    submitted = SimpleNamespace(event=SimpleNamespace(body=m.JobSubmitted("x", Payload(b"{}"), 5, "NORMAL", 1,
                                                                          traceparent=parent)))
    assert _trace_id(None, [submitted]) == "0af7651916cd43dd8448eb211c80319c"
    assert _trace_id(SimpleNamespace(traceparent=None), []) is None


def test_the_gate_asks_once_then_renews_an_expired_answer_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading as th

    from engine.config import load_settings
    from engine.runtime import outputgate

    answers = [(None, 10_000), ("ctx.produce: topic out does not exist", 0), (None, 10_000)]
    asked = th.Semaphore(0)

    class Scripted(outputgate.KafkaTopicGate):
        def _ask(self, topic: str) -> tuple[str | None, int]:
            asked.release()
            return answers.pop(0)

    monkeypatch.setattr(outputgate, "ALLOWED_FOR_S", -1.0)  # every allowed answer has expired at once
    gate = Scripted(load_settings(bootstrap="b:9092"))
    gate.check(OutputRecord("out", b"v"))  # the first check waits for its answer
    assert asked.acquire(timeout=1)
    gate.check(OutputRecord("out", b"v"))  # expired: used, and renewed behind the handler's back
    assert asked.acquire(timeout=5)
    deadline = time.monotonic() + 5
    while gate._answers["out"][1] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OutputRefusedError, match="does not exist"):  # the renewed answer: a refusal
        gate.check(OutputRecord("out", b"v"))
    gate._answers["out"] = (time.monotonic() - 1, *gate._answers["out"][1:])  # the refusal expires:
    gate.check(OutputRecord("out", b"v"))  # asked again in the handler, so a fix is seen at once
    assert asked.acquire(timeout=1) and answers == []
    gate._answers["out"] = (time.monotonic() + 60, None, 1000)
    with pytest.raises(ValidationError, match="max.message.bytes"):
        gate.check(OutputRecord("out", b"x" * 900))


def test_records_produced_from_several_threads_of_one_attempt_are_all_kept() -> None:
    from concurrent.futures import ThreadPoolExecutor

    ctx = JobContext.create(job_id="j", tenant="t", task_type="x", attempt=1, epoch=1, partition=0,
                            idempotency_key=None, deadline=0.0)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: ctx.produce("out", str(n)), range(2000)))
    assert sorted(int(r.value or b"") for r in ctx.produced) == list(range(2000))


def test_a_traced_job_s_records_carry_the_current_span_s_context_or_the_submitter_s() -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    submitter = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def context(traceparent: str | None) -> JobContext:
        return JobContext.create(job_id="j", tenant="t", task_type="x", attempt=1, epoch=1, partition=0,
                                 idempotency_key=None, deadline=0.0, traceparent=traceparent)

    traced, plain = context(submitter), context(None)
    traced.produce("out", b"1", headers={"source": "a"})  # no span current: the submitter's context
    traced.produce("out", b"2", headers=[("traceparent", b"mine")])  # the handler's own is kept
    span = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0x00F067AA0BA902B7, False, TraceFlags(1))
    with trace.use_span(NonRecordingSpan(span)):  # the attempt's span, or a handler's span in it
        traced.produce("out", b"3")
    plain.produce("out", b"4")
    assert [r.headers for r in traced.produced] == [
        (("source", b"a"), ("traceparent", submitter.encode())), (("traceparent", b"mine"),),
        (("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"),)]
    assert plain.produced[0].headers is None  # an untraced job's record is as the handler gave it


@pytest.mark.parametrize("topic", ["epochq.events", "epochq.commands", "epochq.checkpoints", "epochq.workers",
                                   "epochq.schemas", "epochq.tenants", "epochq.anything", "__consumer_offsets",
                                   "__transaction_state"])
def test_a_topic_of_the_namespace_or_an_internal_one_is_refused_to_ctx_produce_whatever_the_acls_say(
        topic: str) -> None:
    from engine.config import load_settings
    from engine.runtime import outputgate
    from engine.runtime.execution.outputs import refuse_reserved, reserved_refusal

    assert reserved_refusal("epochq", topic) is not None and topic in (reserved_refusal("epochq", topic) or "")
    for other in ("billing.invoices", "epochq-events", "epochqx.events", "other.events"):
        assert reserved_refusal("epochq", other) is None
        refuse_reserved("epochq", other)
    with pytest.raises(ValidationError, match=f"topic {topic} is") as raised:
        refuse_reserved("epochq", topic)
    assert raised.value.reason == "reserved_topic"
    gate = outputgate.KafkaTopicGate(load_settings(bootstrap="127.0.0.1:1", namespace="epochq"))
    with pytest.raises(ValidationError, match=f"topic {topic} is"):  # before any broker question: none is asked
        gate.check(OutputRecord(topic, b"v"))
    assert gate._admin is None and gate._answers == {}
    ctx = JobContext.create(job_id="j", tenant="t", task_type="x", attempt=1, epoch=1, partition=0,
                            idempotency_key=None, deadline=0.0, namespace="epochq")
    for context in (ctx, pickle.loads(pickle.dumps(ctx))):  # a process-pool worker refuses it too
        with pytest.raises(ValidationError, match=f"topic {topic} is"):
            context.produce(topic, b"forged")
        assert context.produced == ()


def test_the_executor_s_attempts_refuse_the_engine_s_namespace_topics() -> None:
    app = App()

    @app.task("forward")
    def forward(ctx: JobContext, payload: dict[str, Any]) -> None:
        ctx.produce("ns1.events", b"forged")

    executor = Executor(app, {Lane.NORMAL: 1}, gate=Gate(set()), namespace="ns1")
    try:
        executor.submit(request("forward"))
        deadline = time.monotonic() + 10
        results: list[RunResult] = []
        while not results and time.monotonic() < deadline:
            results = executor.wait_results(0.1)
        assert results and results[0].outcome.kind is AttemptOutcomeKind.INVALID, results
        assert "topic ns1.events is a topic of namespace ns1" in results[0].outcome.message
        assert results[0].outcome.records == ()
    finally:
        executor.shutdown(1.0)
