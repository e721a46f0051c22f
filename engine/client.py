"""The client: submit jobs, cancel or replay them, and learn their outcome from the log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from engine.commands import due_us, new_command
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at, encode_command
from engine.contract.ids import job_id_for_key, new_job_id
from engine.contract.partitioner import partition_for
from engine.domain.lanes import parse_priority
from engine.errors import KafkaUnavailableError, ValidationError
from engine.runtime import kafka
from engine.runtime.joblog import LoggedEvent, job_events, with_fencing
from engine.schedule_client import ScheduleMethods

FINAL = {"completed", "dead", "cancelled", "rejected", "partial"}
STATUS_OF = {
    "JobSubmitted": "accepted", "JobScheduled": "scheduled", "JobQueued": "queued",
    "JobStarted": "running", "JobSucceeded": "completed", "JobFailed": "failed",
    "JobRetryScheduled": "retrying", "JobDeadLettered": "dead", "JobCancelled": "cancelled",
    "JobReplayed": "queued", "JobRequeued": "queued", "JobRejected": "rejected",
    "JobFannedOut": "running", "JobRescheduled": "scheduled",
}


@dataclass
class Outcome:
    """What the log says about a job: its status, and result or error when it has one."""

    job_id: str
    status: str = "submitted"
    result: Any = None
    error: str | None = None
    reason: str | None = None
    attempts: int = 0
    duplicate: bool = False
    events: list[LoggedEvent] = field(default_factory=list)
    children: dict[str, dict[str, str]] = field(default_factory=dict)  # scoped jobs: tenant -> job_id, status, error

    @property
    def done(self) -> bool:
        """Whether the job reached a final state (completed, dead, cancelled, rejected)."""
        return self.status in FINAL

    def apply(self, logged: LoggedEvent) -> None:
        """Take one event of the job into account (fenced events change nothing)."""
        self.events.append(logged)
        if logged.fenced:
            return
        body = logged.event.body
        self.status = STATUS_OF.get(type(body).__name__, self.status)
        _details(self, body)


def _details(outcome: Outcome, body: m.EventBody) -> None:
    if isinstance(body, m.JobSucceeded):
        outcome.result = _decode_result(body.result)
    elif isinstance(body, m.JobFailed):
        outcome.error = f"{body.error_type}: {body.message}"
    elif isinstance(body, m.JobStarted):
        outcome.attempts = body.attempt
    elif isinstance(body, m.JobRejected):
        outcome.reason, outcome.error = body.reason, body.detail
    elif isinstance(body, m.JobDeadLettered):
        outcome.reason = body.reason
    elif isinstance(body, m.DuplicateSubmitted):
        outcome.duplicate = True
    elif isinstance(body, m.JobFannedOut):
        outcome.children = {t: {"job_id": c, "status": "pending", "error": ""} for t, c in body.children.items()}
    elif isinstance(body, m.ChildReported):
        outcome.children[body.child_tenant] = {"job_id": body.child_job_id, "status": body.status, "error": body.error}
    elif isinstance(body, m.JobSettled):
        outcome.status = "completed" if body.outcome == "completed" else "partial"
        outcome.reason = f"{body.succeeded} succeeded, {body.failed} failed"
    elif isinstance(body, m.CommandRefused):
        outcome.reason, outcome.error = "refused", f"{body.command} refused in state {body.state}: {body.reason}"


def _decode_result(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class JobHandle:
    """A submitted job: ``wait()`` follows its events partition until it is final."""

    def __init__(self, client: Client, job_id: str, partition: int, start_offset: int):
        self.client = client
        self.job_id = job_id
        self.partition = partition
        self.start_offset = start_offset

    def wait(self, timeout: float = 30.0) -> Outcome:
        """The job's outcome once final, or its latest status when ``timeout`` runs out."""
        outcome = self._follow(self.start_offset, timeout)
        if outcome.duplicate and not outcome.done:
            return self.client.status(self.job_id)
        return outcome

    def _follow(self, start: int, timeout: float) -> Outcome:
        settings, outcome = self.client.settings, Outcome(self.job_id)
        consumer = kafka.events_reader(settings, "handle")
        topic, key = settings.events_topic, self.job_id.encode()
        consumer.assign([TopicPartition(topic, self.partition, start)])
        deadline = time.monotonic() + timeout
        try:
            while not outcome.done and not (outcome.duplicate and outcome.status == "submitted"):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                records = [(msg.offset(), decode_event_at(msg.value(), topic, self.partition, msg.offset()))
                           for msg in consumer.consume(500, min(remaining, 0.2))
                           if not msg.error() and msg.key() in (key, None)]  # None: ownership claims
                for logged in with_fencing(records, self.job_id, mid_log=True):
                    outcome.apply(logged)
        finally:
            consumer.close()
        return outcome


class Client(ScheduleMethods):
    """Submits commands to ``<ns>.commands`` (acks=all) and reads outcomes from ``<ns>.events``."""

    def __init__(self, settings: Settings | None = None, **overrides: Any):
        self.settings = settings or load_settings(**overrides)
        self._producer = kafka.command_producer(self.settings)
        self._reader = kafka.events_reader(self.settings, "client")
        self._partitions: int | None = None

    def submit(self, task_type: str, payload: Any = None, *, tenant: str, priority: int | str = 5,
               run_at: datetime | float | None = None, delay: float | None = None,
               idempotency_key: str | None = None, lane: str | None = None,
               max_attempts: int | None = None, correlation_id: str | None = None,
               scope: str | None = None) -> JobHandle:
        """Submit one job; returns once the broker has it (acks=all).

        ``scope``: ``None``/``"tenant"`` runs the job for ``tenant``; ``"product:<name>"`` runs one
        child per tenant of the product, ``"global"`` one per known tenant (from ``<ns>.tenants``);
        the parent's outcome then has one row per tenant in ``outcome.children``.
        """
        return self.submit_many([dict(task_type=task_type, payload=payload, tenant=tenant, priority=priority,
                                      run_at=run_at, delay=delay, idempotency_key=idempotency_key, lane=lane,
                                      max_attempts=max_attempts, correlation_id=correlation_id, scope=scope)])[0]

    def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        """Submit many jobs (each a mapping of ``submit``'s arguments) with one flush."""
        commands = [self._submit_command(**dict(job)) for job in jobs]
        return self._send(commands)

    def cancel(self, job_id: str, *, tenant: str = "", reason: str = "", requested_by: str = "") -> JobHandle:
        """Ask the owner to cancel a job that has not started."""
        return self._send([new_command(job_id, tenant, m.CancelJob(reason, requested_by))])[0]

    def replay(self, job_id: str, *, tenant: str = "", reason: str = "", requested_by: str = "") -> JobHandle:
        """Put a dead-lettered job back with a fresh attempt count."""
        return self._send([new_command(job_id, tenant, m.ReplayDeadJob(reason, requested_by))])[0]

    def status(self, job_id: str) -> Outcome:
        """The job's current outcome, folded from its whole history in the log."""
        outcome = Outcome(job_id)
        for logged in job_events(self.settings, job_id):
            outcome.apply(logged)
        return outcome

    def close(self) -> None:
        """Flush and release the Kafka clients."""
        self._producer.flush(10)
        self._reader.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -----------------------------------------------------------------------

    def _submit_command(self, task_type: str, payload: Any, tenant: str, priority: int | str = 5,
                        run_at: datetime | float | None = None, delay: float | None = None,
                        idempotency_key: str | None = None, lane: str | None = None,
                        max_attempts: int | None = None, correlation_id: str | None = None,
                        scope: str | None = None) -> m.Command:
        if not tenant:
            raise ValidationError("tenant: must not be empty")
        job_id = job_id_for_key(tenant, idempotency_key) if idempotency_key else new_job_id()
        body = m.SubmitJob(task_type, encode_payload(payload), parse_priority(priority),
                           due_us(run_at, delay), idempotency_key, lane, max_attempts, scope=scope)
        return new_command(job_id, tenant, body, correlation_id)

    def _send(self, commands: list[m.Command]) -> list[JobHandle]:
        count = self._partition_count()
        parts = {c.job_id: partition_for(c.job_id, count) for c in commands}
        starts = kafka.end_offsets(self._reader, self.settings.events_topic, set(parts.values()))
        errors: list[KafkaError] = []
        for command in commands:
            self._produce(command, parts[command.job_id], errors)
        if self._producer.flush(30) or errors:
            raise KafkaUnavailableError(f"commands not acknowledged: {errors[:3] or 'flush timed out'}")
        return [JobHandle(self, c.job_id, parts[c.job_id], starts[parts[c.job_id]]) for c in commands]

    def _produce(self, command: m.Command, partition: int, errors: list[KafkaError]) -> None:
        on_delivery = lambda err, msg: err and errors.append(err)  # noqa: E731
        kafka.produce(self._producer, self.settings.commands_topic, encode_command(command), command.job_id.encode(),
                      partition, on_delivery)

    def _partition_count(self) -> int:
        if self._partitions is None:
            topic = self.settings.commands_topic
            meta = self._reader.list_topics(topic, timeout=10).topics[topic]
            if meta.error is not None:
                raise KafkaUnavailableError(f"topic {topic} is missing: run `epochq topics ensure`")
            self._partitions = len(meta.partitions)
        return self._partitions


def encode_payload(value: Any) -> m.Payload:
    """A job payload from a Python value: JSON for data, raw for bytes, a model's JSON for pydantic."""
    if isinstance(value, m.Payload):
        return value
    if isinstance(value, (bytes, bytearray)):
        return m.Payload(bytes(value), "application/octet-stream")
    if hasattr(value, "model_dump_json"):
        return m.Payload(value.model_dump_json().encode(), "application/json", type(value).__name__)
    try:
        return m.Payload(json.dumps(value, separators=(",", ":")).encode())
    except (TypeError, ValueError) as e:
        raise ValidationError(f"payload: cannot be encoded as JSON: {e}") from e
