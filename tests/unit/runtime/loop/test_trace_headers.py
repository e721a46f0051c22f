"""The ``traceparent`` record header on a traced job's events (docs/tracing.md), without a broker.

A traced job's events carry the submitter's context, those its attempt's outcome decides carry the attempt
span's; an untraced job's events and the partition's own carry no header, and the write step produces
exactly what was staged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.contract import messages as m
from engine.domain.lanes import Lane
from engine.runtime.execution.executor import AttemptOutcome, RunRequest, RunResult
from engine.runtime.execution.verdicts import AttemptOutcomeKind
from engine.runtime.kafka.ports import Transaction
from engine.runtime.loop import outcomes
from engine.contract.headers import TRACEPARENT
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.write import Writer
from tests.unit.factories import submit
from tests.unit.runtime.loop.test_pipeline import Rig

SUBMITTER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
ATTEMPT = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "p0000")
    yield r
    r.store.close()


def traced(job_id: str, traceparent: str | None = SUBMITTER, task_type: str = "email.send") -> m.Command:
    command = submit(job_id, task_type=task_type)
    return replace(command, body=replace(command.body, traceparent=traceparent))  # type: ignore[type-var]


def headers_of(staged: Staged, job_id: str | None) -> list[tuple[str, Any]]:
    """(event type, the traceparent header or None) of each staged event of ``job_id``."""
    out = []
    for i, event in enumerate(staged.events):
        if event.job_id == job_id:
            found = dict(staged.traced.get(i, []))
            out.append((event.type, found.get(TRACEPARENT)))
    return out


def finish(rig: Rig, outcome: AttemptOutcome) -> None:
    starts = rig.draft.staged.starts
    results = [RunResult(RunRequest(0, 1, job.job_id, job.tenant_id, job.task_type, event.body.attempt,  # type: ignore[union-attr]
                                    Lane.NORMAL, job.payload, None, 0.0, 0, traceparent=job.traceparent), outcome)
               for event, job in starts]
    rig.apply()
    outcomes.record(rig.draft, results, rig.board, rig.poison, rig.ctx())


def test_a_traced_job_s_events_carry_its_context_and_an_untraced_job_s_carry_none(rig: Rig) -> None:
    rig.admit(traced("job-t"))
    rig.admit(submit("job-u"))
    rig.dispatch()
    staged = rig.draft.staged
    assert headers_of(staged, "job-t") == [(t, SUBMITTER.encode()) for t in ("JobSubmitted", "JobQueued", "JobStarted")]
    assert headers_of(staged, "job-u") == [(t, None) for t in ("JobSubmitted", "JobQueued", "JobStarted")]
    assert headers_of(staged, None) == [("OwnershipClaimed", None)]


def test_what_an_attempt_decides_carries_the_attempt_span_s_context(rig: Rig) -> None:
    rig.admit(traced("job-t"))
    rig.dispatch()
    finish(rig, AttemptOutcome(AttemptOutcomeKind.FAILED, error_type="ConnectionError", message="down", retryable=True,
                        traceparent=ATTEMPT))
    staged = rig.draft.staged
    assert headers_of(staged, "job-t") == [("JobFailed", ATTEMPT.encode()), ("JobRetryScheduled", ATTEMPT.encode())]


def test_an_attempt_without_a_span_leaves_the_submitter_s_context(rig: Rig) -> None:
    rig.admit(traced("job-t"))
    rig.dispatch()
    finish(rig, AttemptOutcome(AttemptOutcomeKind.SUCCEEDED))
    assert headers_of(rig.draft.staged, "job-t") == [("JobSucceeded", SUBMITTER.encode())]


def test_a_refused_submit_is_traced_too(rig: Rig) -> None:
    rig.admit(traced("job-r", task_type="no.such.task"))
    assert headers_of(rig.draft.staged, "job-r") == [("JobRejected", SUBMITTER.encode())]


def test_undo_forgets_the_headers_of_what_it_drops(rig: Rig) -> None:
    rig.admit(traced("job-t"))
    staged = rig.draft.staged
    mark = staged.mark()
    rig.admit(traced("job-2"))
    assert max(staged.traced) >= mark[0]
    staged.undo(mark)
    assert staged.traced and max(staged.traced) < mark[0] == len(staged.events)


class Recorder:
    """A transactional producer that records what it is asked to produce."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, Any]] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic: str, value: bytes, key: bytes | None = None, partition: int = -1,
                on_delivery: Any = None, headers: Any = None) -> None:
        self.records.append((key or b"", headers))


def test_the_write_step_produces_the_header_with_each_traced_event_and_none_without(rig: Rig) -> None:
    for n in range(3):  # events in the middle of a transaction take the fast path, the ends the general one
        rig.admit(traced(f"job-t{n}"))
        rig.admit(submit(f"job-u{n}"))
    staged = rig.draft.take_staged()
    producer = Recorder()
    rig.partition.producer = Transaction(producer)  # type: ignore[arg-type]  # the port around the client
    written = Writer("ns.events", "ns.commands", 1)._produce(rig.partition, staged)
    assert written.error is None and len(producer.records) == len(staged.events)
    for key, headers in producer.records:
        if key.startswith(b"job-t"):
            assert headers == [(TRACEPARENT, SUBMITTER.encode())]
        else:
            assert headers is None


def test_an_untraced_job_s_attempt_in_a_span_of_its_own_adds_no_header(rig: Rig) -> None:
    rig.admit(submit("job-u"))
    rig.dispatch()
    finish(rig, AttemptOutcome(AttemptOutcomeKind.SUCCEEDED, traceparent=ATTEMPT))  # an engine that traces: a root span
    assert headers_of(rig.draft.staged, "job-u") == [("JobSucceeded", None)]


def test_an_outcome_turned_cancelled_or_refused_keeps_the_attempt_span_s_context() -> None:
    failed = AttemptOutcome(AttemptOutcomeKind.FAILED, error_type="Stop", message="asked to", traceparent=ATTEMPT)
    assert failed.cancelled().traceparent == ATTEMPT
    succeeded = AttemptOutcome(AttemptOutcomeKind.SUCCEEDED, traceparent=ATTEMPT)
    assert succeeded.refused("out: too large").traceparent == ATTEMPT
