"""The client: submit jobs, cancel or replay them, and learn their outcome from the log."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from engine.commands import dependency_waves, new_command, now_us, submit_command
from engine.config import Settings, load_settings
from engine.contract import messages as m
from engine.contract.bounds import check_bounds
from engine.contract.codec import encode_command
from engine.contract.ids import new_uuid4s
from engine.contract.partitioner import partition_for
from engine.contract.validation import check_job_command, check_schedule_command
from engine.domain.lanes import parse_priority
from engine.domain import tasktypes
from engine.domain.commands import Route, route_of
from engine.domain.ratelimits import parse_rate
from engine.errors import KafkaUnavailableError, NotFoundError, ValidationError
from engine.runtime.kafka.plain import Deliveries, Writer, command_writer
from engine.runtime.kafka.ports import TopicReader, topic_reader
from engine.runtime.kafka.schemas import ensure_published
from engine.questions.waiting import Awaited, Until, Waiter, Watch, finished
from engine.questions.history import job_history
from engine.questions.outcome import FINAL, STATUS_OF, Outcome
from engine.runtime.observe.tracing import current_traceparent
from engine.runtime.signatures import client_signer

__all__ = ["FINAL", "STATUS_OF", "Client", "JobHandle", "Outcome"]
from engine.query_client import QueryMethods
from engine.schedule_client import Receipt, ScheduleMethods

if TYPE_CHECKING:
    from projections.views.ratelimits import LimitRecord

class JobHandle:
    """A submitted job: ``wait()`` reads its events partition until it is final.

    ``starts`` maps each events partition to an offset before any event of the job (an end
    read before the job was produced); the job's partition is worked out when first asked for.
    """

    __slots__ = ("client", "job_id", "command_id", "_partition", "_start", "_starts")

    def __init__(self, client: Client, job_id: str, partition: int | None = None, start_offset: int | None = None,
                 starts: Mapping[int, int] | None = None, command_id: str | None = None):
        self.client = client
        self.job_id = job_id
        self.command_id = command_id  # the command sent for it: a wait says whether this submit was a duplicate
        self._partition = partition
        self._start = start_offset
        self._starts = starts

    @property
    def partition(self) -> int:
        """The partition of the job's commands and events (Kafka's murmur2 of the job id)."""
        if self._partition is None:
            self._partition = partition_for(self.job_id, self.client._partition_count())
        return self._partition

    @property
    def start_offset(self) -> int:
        """An offset in the job's events partition at or before the job's first event."""
        if self._start is None:
            self._start = (self._starts or {}).get(self.partition, 0)
        return self._start

    def wait(self, timeout: float = 30.0, *, watch: Watch | None = None, until: Until = finished) -> Outcome:
        """The job's outcome once final (or once ``until`` holds), or its latest status when ``timeout`` runs out.

        ``watch`` is called with the outcome at each change of status (queued, running, retrying...).
        """
        return self.client.wait_all([self], timeout, watch=watch, until=until)[0]

    def awaited(self) -> Awaited:
        """Where the job's events are to be read from."""
        return Awaited(self.job_id, self.partition, self.start_offset, self.command_id)


F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def naming_kafka(cls: C) -> C:
    """``cls`` (the Client) with every public method's KafkaUnavailableError naming the Kafka it asked (its
    bootstrap address): librdkafka's own says "Broker transport failure", and no address."""
    for name in dir(cls):
        member = getattr(cls, name)
        if not name.startswith("_") and inspect.isfunction(member):
            setattr(cls, name, _naming(member))
    return cls


def _naming(method: F) -> F:
    def named(self: Client, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except KafkaUnavailableError as e:
            raise _named(e, self.settings.bootstrap) from e

    def named_each(self: Client, *args: Any, **kwargs: Any) -> Any:
        try:
            yield from method(self, *args, **kwargs)
        except KafkaUnavailableError as e:
            raise _named(e, self.settings.bootstrap) from e

    wrapper = named_each if inspect.isgeneratorfunction(method) else named
    return functools.wraps(method)(wrapper)  # type: ignore[return-value]


def _named(error: KafkaUnavailableError, bootstrap: str | None) -> KafkaUnavailableError:
    """``error`` itself when it names ``bootstrap`` already (or there is none); else one that does."""
    if not bootstrap or bootstrap in str(error):
        return error
    return type(error)(f"{error} (Kafka at {bootstrap})")


@naming_kafka
class Client(ScheduleMethods, QueryMethods):
    """Submits commands to ``<ns>.commands`` (acks=all) and reads outcomes from ``<ns>.events``."""

    def __init__(self, settings: Settings | None = None, **overrides: Any):
        self.settings = settings or load_settings(**overrides)
        self._writer: Writer | None = None  # made on the first write: a client that only reads needs no write ACL
        self._signer = client_signer(self.settings)  # signs each command with the tenant's key, if configured
        self._reader = topic_reader(self.settings, "client")
        self._partitions: int | None = None
        self._ends = EventEnds(self._reader, self.settings.events_topic)
        self._waiter = Waiter(self.settings)

    def submit(self, task_type: str, payload: Any = None, *, tenant: str, priority: int | str = 5,
               run_at: datetime | float | None = None, delay: float | None = None,
               idempotency_key: str | None = None, lane: str | None = None,
               max_attempts: int | None = None, correlation_id: str | None = None,
               scope: str | None = None, labels: Mapping[str, str] | None = None,
               depends_on: Iterable[Any] | None = None, if_dependency_fails: str = "cancel") -> JobHandle:
        """Submit one job; returns once the broker has it (acks=all).

        Checked first with the engine's rules (docs/contract.md): a bad value raises
        ``ValidationError`` naming the field, and nothing is produced. ``run_at`` in the past
        means now; ``delay`` is seconds from now, never negative.

        ``scope``: ``None``/``"tenant"`` runs the job for ``tenant``; ``"product:<name>"`` runs one
        child per tenant of the product, ``"global"`` one per known tenant (from ``<ns>.tenants``);
        the parent's outcome then has one row per tenant in ``outcome.children``.

        ``depends_on``: jobs (ids or handles) of the same tenant, submitted before this one, that this
        job waits for (status ``waiting``, up to 10,000); it is queued once all completed, and its
        handler reads their results in ``ctx.dependency_results``. If one dies or is cancelled,
        ``if_dependency_fails="cancel"`` (the default) cancels this job (reason ``dependency_failed: …``),
        ``"run"`` runs it anyway; an unknown one cancels it (``dependency_unknown: …``).

        With OpenTelemetry (``epochq[otel]``), the current span's ``traceparent`` goes with the job:
        each attempt runs in a span of that trace (docs/tracing.md).
        """
        job_id, command_id = new_uuid4s(2)
        command = self._submit_command(job_id, command_id, now_us(), task_type, payload, tenant, priority, run_at,
                                       delay, idempotency_key, lane, max_attempts, correlation_id, scope, labels,
                                       depends_on, if_dependency_fails)
        return self._send([command])[0]

    def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[JobHandle]:
        """Submit many jobs (each a mapping of ``submit``'s keyword arguments) with one flush.

        Every job is checked before any is produced: a bad one raises ``ValidationError``
        naming its index and field, and nothing is submitted. A job that depends on another of the
        same call (by its idempotency key's id) is produced once that one is acknowledged.
        """
        batch = list(jobs)
        ids, now = new_uuid4s(2 * len(batch)), now_us()
        commands = [self._job_command(n, ids[2 * n], ids[2 * n + 1], now, job) for n, job in enumerate(batch)]
        handles = {}
        for wave in dependency_waves(commands):
            handles.update({h.job_id: h for h in self._send(wave)})
        return [handles[c.job_id] for c in commands]

    def cancel(self, job_id: str, *, tenant: str | None = None, reason: str = "", requested_by: str = "") -> JobHandle:
        """Cancel a job: one waiting (scheduled, queued, retrying) is cancelled at once; a running one's
        attempt is asked to stop (status ``cancelling``) and the job is cancelled when it stops, or when
        the engine's cancel grace runs out; an attempt that succeeds first completes the job. A final
        job refuses (``handle.wait(until=decided)`` returns at the refusal), and so does a ``tenant``
        that is not the job's (a command acts only within its tenant). Without ``tenant``, the job's own
        tenant is read from its history (``NotFoundError`` if it has none)."""
        tenant = self.tenant_of(job_id, "cancel") if tenant is None else tenant
        return self._send([new_command(job_id, tenant, m.CancelJob(reason, requested_by))])[0]

    def cancel_many(self, jobs: Iterable[tuple[str, str]], *, reason: str = "",
                    requested_by: str = "") -> list[JobHandle]:
        """Cancel many jobs, each ``(job_id, tenant)``, with one flush (``epochq purge``); a dead job is purged."""
        return self._send([new_command(job_id, tenant, m.CancelJob(reason, requested_by)) for job_id, tenant in jobs])

    def replay(self, job_id: str, *, tenant: str | None = None, reason: str = "", requested_by: str = "") -> JobHandle:
        """Put a dead-lettered job back with a fresh attempt count (``tenant``: as for :meth:`cancel`)."""
        tenant = self.tenant_of(job_id, "replay") if tenant is None else tenant
        return self._send([new_command(job_id, tenant, m.ReplayDeadJob(reason, requested_by))])[0]

    def tenant_of(self, job_id: str, command: str = "command") -> str:
        """The job's tenant, from its first event (a command acts only within its job's tenant); NotFoundError
        if the log has no event of it."""
        for logged in self.status(job_id).events:
            if logged.event.tenant_id:
                return logged.event.tenant_id
        raise NotFoundError(f"unknown job {job_id}: no events in the log (give the tenant to send the {command} "
                            "anyway)")

    def wait_all(self, handles: Iterable[JobHandle], timeout: float = 30.0, *,
                 watch: Watch | None = None, until: Until = finished) -> list[Outcome]:
        """Every handle's outcome, in the handles' order, once all are final or ``timeout`` ran out.

        One reader reads each events partition once for all of them.
        """
        batch = list(handles)
        found = {o.job_id: o for o in self.as_completed(batch, timeout, watch=watch, until=until)}
        return [found[h.job_id] for h in batch]

    def as_completed(self, handles: Iterable[JobHandle], timeout: float = 30.0, *,
                     watch: Watch | None = None, until: Until = finished) -> Iterator[Outcome]:
        """Each handle's outcome as soon as it is final; when ``timeout`` runs out, the rest as they stand
        (``outcome.done`` is false for those)."""
        awaited = {h.job_id: h.awaited() for h in handles}
        for outcome in self._waiter.wait(list(awaited.values()), timeout, until, watch):
            yield self._whole(outcome) if outcome.duplicate and not outcome.done else outcome

    def _whole(self, duplicate: Outcome) -> Outcome:
        """A duplicate submit's outcome: its key's job as its whole history tells it (older than the wait)."""
        whole = self.status(duplicate.job_id)
        whole.duplicate, whole.command_id = True, duplicate.command_id
        return whole

    def pause_task_type(self, task_type: str, *, reason: str = "", requested_by: str = "",
                        wait: float = 10.0) -> list[Outcome]:
        """Start no job of ``task_type`` in any partition until it is resumed (queued jobs wait; running ones finish).

        One command per partition; returns each partition's decision (``TaskTypePaused``, or a refusal
        when it already was), read within ``wait`` seconds (an undecided one has no events).
        """
        return self._every_partition(m.PauseTaskType(task_type, reason, requested_by), wait)

    def resume_task_type(self, task_type: str, *, reason: str = "", requested_by: str = "",
                         wait: float = 10.0) -> list[Outcome]:
        """Start jobs of a paused ``task_type`` again in every partition; as ``pause_task_type``."""
        return self._every_partition(m.ResumeTaskType(task_type, reason, requested_by), wait)

    def _every_partition(self, body: tasktypes.TaskTypeBody, wait: float) -> list[Outcome]:
        """Send a command on a task type as a whole to every partition (``engine.domain.tasktypes``); each one's
        decision, read within ``wait`` seconds."""
        count = self._partition_count()
        handles = self._send([new_command(tasktypes.envelope(body, p, count), "", body) for p in range(count)])
        return self.wait_all(handles, wait, until=lambda o: bool(o.events))

    def status(self, job_id: str, *, tenant: str | None = None) -> Outcome:
        """The job's current outcome, folded from its whole history in the log.

        A job with no event at all has status ``unknown`` (``outcome.known`` is false): the id
        is wrong, or no engine has decided its command yet. ``tenant``: the caller's tenant; a
        job of another tenant is ``unknown`` too (operators and auditors leave it out).

        With a projection of the job's partition in ``settings.state_dir`` (an engine's, or a
        standby's), its history index says where the job's events are, and only the log after
        the projection's applied offset is read; otherwise the partition is scanned.
        """
        outcome = Outcome(job_id, status="unknown")
        for logged in job_history(self.settings, job_id, tenant):
            outcome.apply(logged)
        return outcome

    def close(self) -> None:
        """Flush and release the Kafka clients."""
        if self._writer is not None:
            self._writer.flush(10)
        self._reader.close()
        self._waiter.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -----------------------------------------------------------------------

    def _job_command(self, n: int, job_id: str, command_id: str, now: int, job: Mapping[str, Any]) -> m.Command:
        """The command of the ``n``-th job of a batch; errors name the job's index."""
        try:
            return self._submit_command(job_id, command_id, now, **_submit_kwargs(job))
        except ValidationError as e:
            raise ValidationError(f"job {n}: {e}", e.field, e.reason) from None

    def _submit_command(self, job_id: str, command_id: str, now: int, task_type: str, payload: Any, tenant: str,
                        priority: int | str = 5, run_at: datetime | float | None = None, delay: float | None = None,
                        idempotency_key: str | None = None, lane: str | None = None,
                        max_attempts: int | None = None, correlation_id: str | None = None,
                        scope: str | None = None, labels: Mapping[str, str] | None = None,
                        depends_on: Iterable[Any] | None = None,
                        if_dependency_fails: str = "cancel") -> m.Command:
        """A checked SubmitJob: the engine's admission rules, before anything is produced."""
        return submit_command(job_id, command_id, now, task_type, payload, tenant, priority, run_at, delay,
                              idempotency_key, lane, max_attempts, correlation_id, scope, labels,
                              max_payload_bytes=self.settings.max_payload_bytes, depends_on=depends_on,
                              if_dependency_fails=if_dependency_fails, traceparent=current_traceparent())

    def _send(self, commands: list[m.Command]) -> list[JobHandle]:
        """Produce ``commands`` and wait until the broker has them all (acks=all)."""
        for command in commands:
            check_bounds(command)  # for any command given whole (a SubmitJob's other rules ran when it was made)
            if not isinstance(command.body, m.SubmitJob):
                _check(command)
        starts = self._ends.lower_bounds(self._partition_count())
        ensure_published(self.settings, "command")  # once per process: <ns>.schemas has what we write
        deliveries = Deliveries()
        self._produce_all(commands, deliveries)
        left = self._producer.flush(30)
        if failed := deliveries.error(f"{len(deliveries.failed)} of {len(commands)} commands were not accepted"):
            raise failed
        if left:
            raise KafkaUnavailableError(f"{left} of {len(commands)} commands not acknowledged in 30 s")
        return [JobHandle(self, c.job_id, starts=starts, command_id=c.command_id) for c in commands]

    def _produce_all(self, commands: list[m.Command], deliveries: Deliveries) -> None:
        """Encode and hand every command to the producer; delivery failures land in ``deliveries``."""
        signer = self._signer
        encoded = ((value, c.job_id.encode(), signer.headers(value) if signer is not None else None)
                   for c in commands for value in (encode_command(c),))
        self._producer.put(self.settings.commands_topic, encoded, deliveries)

    @property
    def _producer(self) -> Writer:
        if self._writer is None:
            self._writer = command_writer(self.settings)
        return self._writer

    def _partition_count(self) -> int:
        if self._partitions is None:
            self._partitions = len(self._reader.partitions(self.settings.commands_topic, "write to"))
        return self._partitions

    # --- rate limits and priorities (docs/handlers.md, *Rate limits*) ---------------------------

    def set_rate_limit(self, task_type: str, rate: float | str, *, burst: int = 1, reason: str = "",
                       requested_by: str = "", wait: float = 10.0) -> list[Outcome]:
        """Start jobs of ``task_type`` at most ``rate`` a second across all partitions (a number, or text such
        as ``"10/s"``, ``"30/m"``), ``burst`` at once; queued jobs wait in their place for the bucket.

        One command per partition; each partition allows ``rate / N`` a second (N partitions) with a bucket
        of ``max(1, burst // N)``. Returns each partition's decision (``RateLimitSet``, or a refusal when
        it had this limit already), read within ``wait`` seconds."""
        per_s = parse_rate(rate) if isinstance(rate, str) else rate
        return self._every_partition(m.SetRateLimit(task_type, per_s, burst, reason, requested_by), wait)

    def clear_rate_limit(self, task_type: str, *, reason: str = "", requested_by: str = "",
                         wait: float = 10.0) -> list[Outcome]:
        """Remove ``task_type``'s rate limit in every partition; as ``set_rate_limit``."""
        return self._every_partition(m.ClearRateLimit(task_type, reason, requested_by), wait)

    def rate_limits(self) -> list[tuple[int, LimitRecord]]:
        """(partition, ``LimitRecord``) of every rate limit in the projections of ``settings.state_dir``."""
        from engine.questions.limits import rate_limits

        return list(rate_limits(self.settings))

    def set_tenant_weight(self, tenant: str, weight: float) -> None:
        """Set ``tenant``'s fair-share weight in ``<ns>.tenants``, keeping its queue limit, product and keys
        (``epochq tenants set`` sets them all)."""
        from engine.questions.tenants import tenant_table
        from engine.runtime.tenants import set_tenant

        config = tenant_table(self.settings).get(tenant)
        set_tenant(self.settings, tenant, weight, config.max_queued if config else None,
                   config.product if config else None)

    def reprioritize(self, job_id: str, priority: int | str, *, tenant: str | None = None, reason: str = "",
                     requested_by: str = "", wait: float | None = 10.0) -> Receipt:
        """Give a waiting (queued, scheduled, retrying) job another priority (0-9 or an alias); a queued one
        moves in its ready queue, to its new priority's lane unless pinned to one. A ``Receipt``: ``accepted``,
        or ``refused`` (the job has started or ended, has that priority, or ``tenant`` is not the job's);
        ``tenant``: as for :meth:`cancel`."""
        tenant = self.tenant_of(job_id, "reprioritize") if tenant is None else tenant
        command = new_command(job_id, tenant, m.ReprioritizeJob(parse_priority(priority), reason, requested_by))
        return self._decided(job_id, command, wait)


SUBMIT_KEYS = frozenset(inspect.signature(Client.submit).parameters) - {"self"}
"""The keys a job of ``submit_many`` may have: ``submit``'s arguments."""


def _submit_kwargs(job: Mapping[str, Any]) -> dict[str, Any]:
    """``job`` as ``submit``'s arguments; ValidationError naming a key that is not one, or one missing."""
    if not isinstance(job, Mapping):
        raise ValidationError(f"must be a mapping of submit's arguments, got {type(job).__name__}")
    unknown = sorted(str(k) for k in job if k not in SUBMIT_KEYS)
    if unknown:
        raise ValidationError(f"unknown key(s) {', '.join(map(repr, unknown))}; submit takes "
                              f"{', '.join(sorted(SUBMIT_KEYS))}", unknown[0], "invalid_key")
    missing = [k for k in ("task_type", "tenant") if k not in job]
    if missing:
        raise ValidationError(f"missing key(s) {', '.join(map(repr, missing))}", missing[0])
    return {"payload": None, **job}


def _check(command: m.Command) -> None:
    """The engine's rules for a command other than SubmitJob, checked before producing it."""
    route = route_of(command)  # engine/domain/commands.py
    if route is Route.TASK_TYPE:
        tasktypes.check(command)
    elif route is Route.SCHEDULE:
        check_schedule_command(command)
    else:
        check_job_command(command, command.issued_at)


class EventEnds:
    """Where the events of jobs submitted now can start, per events partition: ends read at most ``ttl`` s ago.

    An end read before a job was produced is at or before the job's first event, however old,
    so one read serves every job submitted in the next ``ttl`` seconds; a handle that waits
    then reads at most ``ttl`` seconds of other jobs' events first.
    """

    def __init__(self, reader: TopicReader, topic: str, ttl: float = 1.0):
        self._reader, self._topic, self._ttl = reader, topic, ttl
        self._ends: Mapping[int, int] = {}
        self._read_at = -float("inf")

    def lower_bounds(self, partitions: int) -> Mapping[int, int]:
        """Per partition, an offset at or before the first event of any job produced from now on."""
        if time.monotonic() - self._read_at > self._ttl or len(self._ends) != partitions:
            read_at = time.monotonic()
            self._ends = self._reader.end_offsets(self._topic, range(partitions))
            self._read_at = read_at
        return self._ends
