"""What a handler is told about the attempt it runs: the job, the attempt, the deadline."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from engine.domain.fence import fencing_token as fencing_token
from engine.runtime.execution.outputs import (
    Headers,
    OutputRecord,
    TopicGate,
    output_record,
    refuse_reserved,
    traced_headers,
)
from engine.runtime.observe.tracing import current_traceparent
from engine.errors import ValidationError

LOGGER_PREFIX = "epochq.handler."
NO_CANCELS: frozenset[int] = frozenset()
SLEEP_STEP_S = 0.05
MAX_PROGRESS_MESSAGE = 1000
_FIRST_RECORD = threading.Lock()


class Cancelled(Exception):  # a control-flow signal, not an error (like Retry): no -Error suffix
    """Raised by ``ctx.raise_if_cancelled()`` (or by a handler itself): the attempt stops because a cancel
    was asked for. After a cancel request, any exception ends the job ``cancelled``; without one, this is
    an ordinary failure."""


class JobLoggerAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger whose every line names the job: in the message and in the record's extras."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        kwargs["extra"] = {**extra, **kwargs.get("extra", {})}
        tag = " ".join(f"{k}={extra[k]}" for k in ("job_id", "tenant", "attempt", "epoch", "partition"))
        return f"[{tag}] {msg}", kwargs


@dataclass(frozen=True, slots=True)
class JobContext:
    """The facts of one attempt, handed to the handler; the deadline is wall-clock seconds.

    ``logger`` carries job_id, tenant, task_type, epoch, partition and attempt in every
    record's extras (and in the message). Pickling drops the logger and the receiving
    process builds a fresh one, so a context crosses into a process-pool worker.
    """

    job_id: str
    tenant: str
    task_type: str
    attempt: int
    epoch: int
    partition: int
    idempotency_key: str | None
    deadline: float
    _logger: logging.LoggerAdapter | None = field(default=None, repr=False, compare=False)  # type: ignore[type-arg]
    _token: int = field(default=-1, repr=False, compare=False)
    _cancels: AbstractSet[int] = field(default=NO_CANCELS, repr=False, compare=False)  # the executor's, shared
    _progress: dict[int, tuple[float | None, str]] | None = field(default=None, repr=False, compare=False)
    _gate: TopicGate | None = field(default=None, repr=False, compare=False)  # the executor's, shared
    _records: list[OutputRecord] | None = field(default=None, repr=False, compare=False)  # made by produce()
    _traceparent: str | None = field(default=None, repr=False, compare=False)
    _dependencies: Mapping[str, tuple[str, bytes | None, str]] | None = field(default=None, repr=False)
    _replays: int = field(default=0, repr=False, compare=False)  # replays from the dead-letter queue so far
    _namespace: str | None = field(default=None, repr=False, compare=False)  # whose topics ctx.produce refuses

    @property
    def traceparent(self) -> str | None:
        """The submitter's W3C trace context, if it traced the submit (docs/tracing.md)."""
        return self._traceparent

    def produce(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
                headers: Mapping[str, bytes | str | None] | Headers | None = None) -> None:
        """Produce a record to ``topic`` in the transaction that records this attempt's success.

        Nothing is written now: if the attempt succeeds, the record is written in the same Kafka
        transaction as its ``JobSucceeded`` (read_committed consumers see it exactly once per
        success); if it fails, times out, is cancelled or its engine loses the partition first,
        the record is never seen. A topic that is missing or that the engine may not write, and a
        record too large for Kafka, raise here (``OutputRefusedError``, ``ValidationError``), so
        the attempt fails with that error; so does a topic of the engine's namespace or an internal
        (``__``) one, whatever the ACLs say (``ValidationError``, reason ``reserved_topic``)
        (docs/handlers.md, "Effects exactly once").

        A traced job's record carries a ``traceparent`` header (the handler's current span, else the
        submitter's context) unless ``headers`` has one (docs/tracing.md).
        """
        if self._traceparent is not None:
            headers = traced_headers(headers, current_traceparent() or self._traceparent)
        record = output_record(topic, value, key, headers)
        if self._namespace is not None:
            refuse_reserved(self._namespace, record.topic)
        if self._gate is not None:
            self._gate.check(record)
        if self._records is None:
            with _FIRST_RECORD:  # a handler's threads may produce at once: one list per attempt
                if self._records is None:
                    object.__setattr__(self, "_records", [])
        self._records.append(record)  # type: ignore[union-attr]

    @property
    def produced(self) -> tuple[OutputRecord, ...]:
        """The records this attempt produced so far (``ctx.produce``), in order."""
        return tuple(self._records or ())

    @property
    def fencing_token(self) -> int:
        """A number that grows with the partition's epoch, then with the job's replays and attempt: give it to a
        system the handler writes to, which keeps the highest token seen and refuses a write that
        carries a lower one (``... WHERE token < :new``), so a fenced zombie's late write is
        rejected (docs/handlers.md, "Fencing tokens")."""
        return fencing_token(self.epoch, self.attempt, self._replays)

    @property
    def dependency_results(self) -> dict[str, Any]:
        """Each dependency's job id mapped to its result (decoded JSON; None if it returned nothing), or, for one
        that did not complete (the job runs anyway: ``if_dependency_fails="run"``), ``{"status": "dead" |
        "cancelled" | "partial", "error": "..."}``. Empty for a job submitted without ``depends_on``."""
        return {job_id: dependency_result(*report) for job_id, report in (self._dependencies or {}).items()}

    def progress(self, value: float | None = None, message: str = "") -> None:
        """Report how far the attempt got (``value``: a fraction, a count...; ``message``: text).

        The engine records the latest report as a ``JobProgressed`` event about once a second
        (``epochq status`` shows it); reports in between replace each other. A no-op in a
        process-pool worker.
        """
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise ValidationError(f"progress value must be a finite number or None, got {value!r}", "progress")
        if self._progress is not None:
            self._progress[self._token] = (None if value is None else float(value), str(message)[:MAX_PROGRESS_MESSAGE])

    @property
    def cancelled(self) -> bool:
        """Whether a cancel of this attempt was asked for (``epochq cancel``): stop soon, then return or raise.

        Always false in a process-pool worker (``executor="process"``): such an attempt is stopped by
        the cancel grace only.
        """
        return self._token in self._cancels

    def raise_if_cancelled(self) -> None:
        """Raise ``Cancelled`` if a cancel of this attempt was asked for: a checkpoint for loops."""
        if self._token in self._cancels:
            raise Cancelled(f"job {self.job_id} attempt {self.attempt} was asked to stop")

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early when a cancel is asked for; True if it was."""
        end = time.monotonic() + seconds
        while not self.cancelled and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, SLEEP_STEP_S))
        return self.cancelled

    @property
    def logger(self) -> logging.LoggerAdapter:  # type: ignore[type-arg]
        """A logger naming this attempt in every line, built on first use (most handlers never log)."""
        if self._logger is None:
            extra = {
                "job_id": self.job_id, "tenant": self.tenant, "task_type": self.task_type,
                "attempt": self.attempt, "epoch": self.epoch, "partition": self.partition,
            }
            object.__setattr__(self, "_logger",
                               JobLoggerAdapter(logging.getLogger(LOGGER_PREFIX + self.task_type), extra))
        return self._logger  # type: ignore[return-value]

    @classmethod
    def create(
        cls,
        *,
        job_id: str,
        tenant: str,
        task_type: str,
        attempt: int,
        epoch: int,
        partition: int,
        idempotency_key: str | None,
        deadline: float,
        dependencies: Mapping[str, tuple[str, bytes | None, str]] | None = None,
        traceparent: str | None = None,
        replays: int = 0,
        namespace: str | None = None,
    ) -> JobContext:
        """A context whose logger comes from ``epochq.handler.<task_type>``; ``namespace``: the engine's, whose
        topics ``produce`` refuses."""
        return cls(job_id, tenant, task_type, attempt, epoch, partition, idempotency_key, deadline,
                   _traceparent=traceparent, _dependencies=dependencies, _replays=replays, _namespace=namespace)

    def remaining(self) -> float:
        """Seconds left until the deadline (0.0 once it has passed)."""
        return max(0.0, self.deadline - time.time())

    def fields(self) -> dict[str, Any]:
        """Every field but the logger: what :meth:`create` needs to rebuild this context."""
        return {
            "job_id": self.job_id, "tenant": self.tenant, "task_type": self.task_type,
            "attempt": self.attempt, "epoch": self.epoch, "partition": self.partition,
            "idempotency_key": self.idempotency_key, "deadline": self.deadline, "dependencies": self._dependencies,
            "traceparent": self._traceparent, "replays": self._replays, "namespace": self._namespace,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.fields(),))


def _rebuild(fields: dict[str, Any]) -> JobContext:
    return JobContext.create(**fields)


def dependency_result(status: str, result: bytes | None, error: str) -> Any:
    """What ``ctx.dependency_results`` shows of one dependency: its decoded result, or its status and error."""
    if status != "completed":
        return {"status": status, "error": error}
    if result is None:
        return None
    try:
        return json.loads(result)
    except ValueError:  # not JSON (written by a producer of another language): the bytes as they are
        return result
