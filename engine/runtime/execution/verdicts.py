"""How an attempt ended: the request the owner makes, the verdict on it, and the two together.

Values only: the executor produces them, the partition owner turns them into events.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pydantic import ValidationError as PydanticValidationError

from engine.contract.messages import Payload
from engine.domain.lanes import Lane
from engine.errors import ValidationError
from engine.runtime.execution.outputs import OutputRecord

TRACEBACK_FRAMES = 3
MAX_TEXT = 2000
INVALID_ERRORS = (ValidationError, PydanticValidationError)


class AttemptOutcomeKind(StrEnum):
    """How an attempt ended: ``invalid`` is dead-lettered at once, ``failed`` may be retried."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INVALID = "invalid"
    CANCELLED = "cancelled"  # stopped (raised, or ran out of its cancel grace) after a cancel was asked for


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One attempt the owner of ``partition`` (at ``epoch``) asks the executor to run."""

    partition: int
    epoch: int
    job_id: str
    tenant: str
    task_type: str
    attempt: int
    lane: Lane
    payload: Payload
    idempotency_key: str | None
    deadline: float
    queued_at_us: int
    dependencies: Mapping[str, tuple[str, bytes | None, str]] | None = None  # how each dependency ended
    traceparent: str | None = None  # the submitter's trace context: the attempt's span joins it
    replays: int = 0  # times the job was replayed from the dead-letter queue (its attempts count again from 1)


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How one attempt ended, as the executor (or a remote worker's ``ReportAttempt.outcome``) says; the source
    of truth for the ``JobSucceeded``/``JobFailed`` the owner writes. Not ``engine.Outcome``, which is how a
    whole job stands as the log says (docs/architecture.md, *Words*). ``traceback`` is a short summary.

    ``records``: what a successful attempt produced (``ctx.produce``), written with its success.
    ``traceparent``: the W3C context of the attempt's span, when traced: the events its outcome decides carry
    it (docs/tracing.md)."""

    kind: AttemptOutcomeKind
    result: bytes | None = None
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    duration_us: int = 0
    retryable: bool = False
    records: tuple[OutputRecord, ...] = ()
    traceparent: str | None = None

    @classmethod
    def succeeded(cls, result: bytes | None, duration_us: int,
                  records: list[OutputRecord] | None = None) -> AttemptOutcome:
        """The handler returned ``result`` (already encoded), having produced ``records``."""
        return cls(AttemptOutcomeKind.SUCCEEDED, result=result, duration_us=duration_us,
                   records=tuple(records) if records else ())

    def refused(self, error: str) -> AttemptOutcome:
        """This success's outcome once the brokers refused a record it produced: a failure, retried."""
        message = f"a record it produced was refused: {error}"
        return AttemptOutcome(AttemptOutcomeKind.FAILED, None, "OutputRefusedError", clip(message), "",
                              self.duration_us, retryable=True, traceparent=self.traceparent)

    @classmethod
    def from_exception(cls, exc: BaseException, duration_us: int) -> AttemptOutcome:
        """A validation error is ``invalid`` (never retried); anything else ``failed``."""
        invalid = isinstance(exc, INVALID_ERRORS)
        kind = AttemptOutcomeKind.INVALID if invalid else AttemptOutcomeKind.FAILED
        return cls(kind, None, type(exc).__qualname__, clip(str(exc)), summarize_traceback(exc),
                   duration_us, retryable=not invalid)

    def cancelled(self) -> AttemptOutcome:
        """This failed attempt's outcome once a cancel of it was asked for: it stopped, as asked."""
        return AttemptOutcome(AttemptOutcomeKind.CANCELLED, None, self.error_type, self.message, self.traceback,
                       self.duration_us, retryable=False, traceparent=self.traceparent)

    @classmethod
    def out_of_grace(cls, grace_s: float, duration_us: int) -> AttemptOutcome:
        """Asked to stop, the attempt ran past its cancel grace; whatever it returns later is discarded."""
        message = f"did not stop within the cancel grace ({grace_s:.3g}s); a result it produces later is discarded"
        return cls(AttemptOutcomeKind.CANCELLED, None, "Cancelled", message, "", duration_us, retryable=False)

    @classmethod
    def timed_out(cls, allowed_s: float, duration_us: int) -> AttemptOutcome:
        """The attempt ran past its deadline; whatever it returns later is discarded."""
        message = f"attempt exceeded its deadline ({allowed_s:.3g}s); a result it produces later is discarded"
        return cls(AttemptOutcomeKind.FAILED, None, "TimeoutError", message, "", duration_us, retryable=True)


@dataclass(frozen=True, slots=True)
class RunResult:
    """An attempt together with how it ended."""

    request: RunRequest
    outcome: AttemptOutcome


def summarize_traceback(exc: BaseException) -> str:
    """The last few frames and the exception line, at most ``MAX_TEXT`` characters."""
    tbe = traceback.TracebackException.from_exception(exc)
    frames = traceback.StackSummary.from_list(list(tbe.stack)[-TRACEBACK_FRAMES:])
    header = "Traceback (most recent call last):\n" if frames else ""
    return clip(header + "".join(frames.format()) + "".join(tbe.format_exception_only()))


def clip(text: str) -> str:
    """``text`` cut to its last ``MAX_TEXT`` characters."""
    return text if len(text) <= MAX_TEXT else "…" + text[-(MAX_TEXT - 1):]


def since(started_ns: int) -> int:
    """Microseconds elapsed since ``started_ns`` (``time.perf_counter_ns``)."""
    return (time.perf_counter_ns() - started_ns) // 1000
