"""A remote worker: runs the attempts dispatched to its pool and reports each back to the owner.

``epochq worker run app:app --pool P --concurrency N``. It reads ``<ns>.dispatch.<P>`` in the consumer
group ``<ns>.pool.<P>`` (read_committed), runs each attempt with the engine's own executor (timeouts,
progress, cancels as in process), sends each result as a ``ReportAttempt`` command keyed by the job id
(so it is decided by the job's owner, in the transaction that commits its offset), and publishes a
heartbeat to ``<ns>.workers`` every few seconds naming the fencing token of each attempt it runs: what
renews their leases. It never writes ``<ns>.events``. Protocol: docs/workers.md.

It reads its partitions all the time, full or not, so that a cancel (a record of the same topic) reaches it while
every slot is busy: a dispatch it has no slot for yet is *held*, in arrival order, unnamed by its heartbeats (its
lease runs as if it still waited in the topic), and its partition's offset is stored no further than the first
record it holds, so a worker that dies or loses the partition leaves it to the next reader (:class:`Offsets`).
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.app import App
from engine.clock import now_us
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import encode_command
from engine.contract.heartbeat import LaneSlots, LeasedJob, WorkerRow, encode_heartbeat
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.errors import ConfigError, DecodeError
from engine.runtime.execution.executor import Executor
from engine.runtime.execution.verdicts import AttemptOutcome, AttemptOutcomeKind, RunRequest, RunResult
from engine.runtime.kafka import plain
from engine.runtime.kafka.ports import Record, dispatch_reader
from engine.runtime.outputgate import KafkaTopicGate
from engine.runtime.remote.owner import DEFAULT_POOL
from engine.runtime.remote.dispatch import CancelAttempt, Dispatch, decode_message, dispatch_topic, encode_records
from engine.runtime.signatures import worker_signer
from engine.runtime.topics import ensure_dispatch_topic, workers_topic

log = logging.getLogger("epochq.worker")
MAX_BEAT_S = 5.0
MIN_BEAT_S = 0.5
IDLE_WAIT_S = 0.2
"""How long an idle worker waits for its first dispatch per round (``consume`` of n records waits for all n or the
timeout: an idle worker asks for one, then takes at once what else is there)."""
READ_BATCH = 500
"""At most this many records taken per round (a busy worker reads on: cancels must reach it)."""


@dataclass(slots=True)
class Taken:
    """One attempt this worker took: its dispatch, what it runs as, where its record is (partition, offset), and
    whether it started (else it is held, waiting for a slot)."""

    dispatch: Dispatch
    request: RunRequest
    at: tuple[int, int] = (-1, -1)
    started: bool = False
    progress: float | None = None
    message: str = ""


@dataclass(slots=True)
class Offsets:
    """How far this worker may let each dispatch partition's offset go: past every record it read, but never past
    the first one it holds without having started it (records of one partition start in their order). Pure."""

    read_to: dict[int, int] = field(default_factory=dict)  # partition -> the offset after the last record read
    stored: dict[int, int] = field(default_factory=dict)  # partition -> the offset last stored for commit

    def read(self, partition: int, offset: int) -> None:
        """A record of ``partition`` at ``offset`` was read."""
        self.read_to[partition] = max(self.read_to.get(partition, 0), offset + 1)

    def due(self, held: Iterable[tuple[int, int]]) -> dict[int, int]:
        """The offsets to store now, per partition whose point moved, given the (partition, offset) still held."""
        first: dict[int, int] = {}
        for partition, offset in held:
            first[partition] = min(offset, first.get(partition, offset))
        due = {p: first.get(p, end) for p, end in self.read_to.items() if first.get(p, end) != self.stored.get(p)}
        self.stored.update(due)
        return due

    def forget(self, partitions: Iterable[int]) -> None:
        """These partitions went to another worker."""
        for p in partitions:
            self.read_to.pop(p, None)
            self.stored.pop(p, None)


def served(app: App, pool: str) -> list[str]:
    """The task types of ``app`` a worker of ``pool`` runs: those declared with ``pool=``, and those that name no
    pool for the ``default`` pool (an engine run with ``--no-execute`` sends them there). Raises ConfigError
    naming the app's pools when there is none (a mistyped ``--pool`` would otherwise serve nothing, silently)."""
    types = sorted(t for t in app.task_types if app.spec(t).pool == pool
                   or (pool == DEFAULT_POOL and app.spec(t).pool is None))
    if not types:
        pools = sorted({p for t in app.task_types if (p := app.spec(t).pool) is not None})
        raise ConfigError(f"--pool {pool}: no task type of this app runs in pool {pool!r} (its pools: "
                          f"{', '.join(pools) or 'none'}; '{DEFAULT_POOL}': the task types that name no pool, "
                          "sent there by an engine run with --no-execute)")
    return types


def beat_every(app: App, pool: str) -> float:
    """Seconds between heartbeats: a third of the shortest lease among the pool's task types, within bounds."""
    leases = [app.spec(t).lease for t in app.task_types if app.spec(t).pool in (pool, None)]
    return max(MIN_BEAT_S, min(MAX_BEAT_S, min(leases, default=30.0) / 3))


def request_of(d: Dispatch, now: float) -> RunRequest:
    """What the executor runs for dispatch ``d``."""
    lane = Lane(d.lane) if d.lane in {ln.value for ln in Lane} else Lane.NORMAL
    return RunRequest(partition=d.partition, epoch=d.epoch, job_id=d.job_id, tenant=d.tenant, task_type=d.task_type,
                      attempt=d.attempt, lane=lane, payload=d.payload, idempotency_key=d.idempotency_key,
                      deadline=now + d.timeout_s, queued_at_us=d.dispatched_at_us, traceparent=d.traceparent,
                      replays=d.replays, dependencies=d.dependencies)


def lapsing(d: Dispatch, now: float, beat_s: float) -> bool:
    """Whether less than one heartbeat of ``d``'s lease is left at ``now``: started now, no heartbeat could renew it in
    time (the owner fails it as ``lease_expired`` and retries it)."""
    return d.dispatched_at_us / 1e6 + d.lease_s - beat_s < now


def cancelled_before_start(d: Dispatch) -> AttemptOutcome:
    """How an attempt ends that was cancelled while it waited here for a slot."""
    return AttemptOutcome(AttemptOutcomeKind.CANCELLED,
                          message=f"cancelled before it started (held by a full worker of {d.pool})")


def report_of(taken: Taken, result: RunResult, worker: str) -> m.Command:
    """The ``ReportAttempt`` command that tells the owner how ``taken`` ended, with the records its handler
    produced (the owner writes them with the job's ``JobSucceeded``). Pure but for its id."""
    d, out = taken.dispatch, result.outcome
    records = encode_records(out.records) if out.records else None
    body = m.ReportAttempt(d.attempt, d.fencing_token, out.kind.value, out.duration_us, out.result, out.error_type,
                           out.message, out.traceback, out.retryable, worker, d.pool, records)
    return m.Command(str(uuid.uuid4()), d.job_id, d.tenant, now_us(), body)


class Worker:
    """One worker process of one pool."""

    def __init__(self, app: App, settings: Settings, pool: str, concurrency: int = 8,
                 instance: str | None = None) -> None:
        self.app, self.settings, self.pool, self.concurrency = app, settings, pool, concurrency
        self.instance = instance or f"worker-{socket.gethostname()}-{os.getpid()}"
        self.stopping = threading.Event()
        self.task_types = served(app, pool)  # before the pool's topic is made: a mistyped pool stops here
        topic = dispatch_topic(settings.namespace, pool)
        ensure_dispatch_topic(settings, topic)
        self.reader = dispatch_reader(settings, topic, f"{settings.namespace}.pool.{pool}", on_revoke=self._revoked)
        self.topic = topic
        self.executor = Executor(app, {lane: concurrency for lane in RUNNABLE_LANES}, gate=KafkaTopicGate(settings),
                                 namespace=settings.namespace)
        self.results = plain.command_writer(settings)
        self.signer = worker_signer(settings)
        self.beats = plain.writer(settings, {"acks": "all", "linger.ms": 0, "message.timeout.ms": 10_000})
        self.every_s = beat_every(app, pool)
        self.started_at_us = now_us()
        self.taken: dict[tuple[str, int], Taken] = {}  # (job id, attempt) -> running, or held waiting for a slot
        self.waiting: collections.deque[Taken] = collections.deque()  # held: taken, not started, in arrival order
        self.offsets = Offsets()
        self._next_beat = 0.0
        self.reported = 0
        self.skipped = 0

    def run(self, grace_s: float = 10.0) -> None:
        """Take, run and report attempts until ``stop()``; then finish the running ones within ``grace_s``."""
        log.info("worker %s serving pool %s (%d slots) from %s", self.instance, self.pool, self.concurrency,
                 self.settings.require_bootstrap())
        try:
            while not self.stopping.is_set():
                self.step()
            self._drain(grace_s)
        finally:
            self.close()

    def stop(self) -> None:
        """Stop taking attempts (safe from signal handlers)."""
        self.stopping.set()

    def step(self) -> None:
        """One round: read what is there (dispatches, cancels), start what fits, report what finished, beat if due."""
        self._take(self._read())
        self._start_waiting()
        self._store_offsets()
        self._report(self.executor.wait_results(0.01) if self.taken else [])
        self._beat()

    def running(self) -> int:
        """How many attempts this worker runs now (held ones not counted)."""
        return len(self.taken) - len(self.waiting)

    def _read(self) -> list[Record]:
        if self.taken:  # busy: take what is there without waiting (cancels among it), then wait for results
            return self.reader.read(READ_BATCH, 0)
        return self.reader.read_soon(READ_BATCH, IDLE_WAIT_S)  # idle: wake with the first record

    def _take(self, messages: list[Record]) -> None:
        now = time.time()
        for msg in messages:
            self.offsets.read(msg.partition() or 0, msg.offset() or 0)
            try:
                d = decode_message(msg.value())
            except DecodeError as e:
                log.warning("skipped a record of %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), e)
                continue
            if isinstance(d, CancelAttempt):
                self._cancel(d)
                continue
            if lapsing(d, now, self.every_s):
                self._skip(d, now)
                continue
            taken = Taken(d, request_of(d, now), (msg.partition() or 0, msg.offset() or 0))
            self.taken[(d.job_id, d.attempt)] = taken
            self.waiting.append(taken)

    def _skip(self, d: Dispatch, now: float) -> None:
        self.skipped += 1
        log.info("job %s attempt %d: dispatched %.1fs ago, its lease (%.3gs) all but lapsed; skipped (the owner "
                 "retries it)", d.job_id, d.attempt, now - d.dispatched_at_us / 1e6, d.lease_s)

    def _cancel(self, c: CancelAttempt) -> None:
        """Ask a running attempt to stop (``ctx.cancelled``), as the owner's cancel says; one held for a slot never
        starts: it is reported ``cancelled`` at once."""
        taken = self.taken.get((c.job_id, c.attempt))
        if taken is None or taken.dispatch.fencing_token != c.fencing_token:
            return
        if not taken.started:
            self.waiting.remove(taken)
            del self.taken[(c.job_id, c.attempt)]
            self._send(report_of(taken, RunResult(taken.request, cancelled_before_start(taken.dispatch)),
                                 self.instance))
            return
        log.info("job %s attempt %d: cancel asked (grace %.3gs)", c.job_id, c.attempt, c.grace_s)
        self.executor.cancel(c.job_id, c.attempt, c.grace_s)

    def _revoked(self, partitions: list[int]) -> None:
        """Partitions went to another worker: the dispatches held from them are its now (their offsets were never
        stored past them); the attempts running here run on."""
        gone = set(partitions)
        for taken in [t for t in self.waiting if t.at[0] in gone]:
            self.waiting.remove(taken)
            del self.taken[(taken.dispatch.job_id, taken.dispatch.attempt)]
        self.offsets.forget(gone)

    def _store_offsets(self) -> None:
        due = self.offsets.due(t.at for t in self.waiting)
        if due and not self.reader.store_offsets(self.topic, due):
            log.debug("dispatch offsets %s not stored: a partition was revoked meanwhile", due)

    def _start_waiting(self) -> None:
        """Start held attempts in arrival order while slots are free; one whose lease all but lapsed while held is
        skipped (the owner retries it)."""
        now = time.time()
        while self.waiting and self.running() < self.concurrency \
                and self.executor.free_slots(self.waiting[0].request.lane) > 0:
            taken = self.waiting.popleft()
            d = taken.dispatch
            if lapsing(d, now, self.every_s):
                del self.taken[(d.job_id, d.attempt)]
                self._skip(d, now)
                continue
            self.executor.submit(taken.request)
            taken.started = True
            if lapsing(d, now, 2 * self.every_s):
                self._next_beat = 0.0  # little of its lease is left: the owner hears of it at once

    def _report(self, results: list[RunResult]) -> None:
        for result in results:
            taken = self.taken.pop((result.request.job_id, result.request.attempt), None)
            if taken is None:
                continue
            self._send(report_of(taken, result, self.instance))
        for request, value, message in self.executor.take_progress(self.every_s / 2):
            taken = self.taken.get((request.job_id, request.attempt))
            if taken is not None:
                taken.progress, taken.message = value, message

    def _send(self, command: m.Command) -> None:
        value = encode_command(command)
        headers = self.signer.headers(value) if self.signer is not None else None
        self.results.produce(self.settings.commands_topic, value, command.job_id.encode(), headers)
        self.reported += 1

    def _beat(self, force: bool = False) -> None:
        clock = time.monotonic()
        if clock < self._next_beat and not force:
            return
        self._next_beat = clock + self.every_s
        self.beats.produce(workers_topic(self.settings), encode_heartbeat(self.row()), self.instance.encode())

    def row(self) -> WorkerRow:
        """This worker's heartbeat now."""
        started = [t for t in self.taken.values() if t.started]  # a held one's lease runs as if it were in the topic
        jobs = [LeasedJob(t.dispatch.job_id, t.dispatch.fencing_token, t.progress, t.message) for t in started]
        running = len(started)
        return WorkerRow(self.instance, socket.gethostname(), os.getpid(), self.started_at_us, now_us(), [],
                         [LaneSlots("ANY", running, max(0, self.concurrency - running))],
                         sorted({t.dispatch.job_id for t in started}),
                         self.every_s, task_types=self.task_types, pool=self.pool, jobs=jobs)

    def _drain(self, grace_s: float) -> None:
        end = time.monotonic() + grace_s
        for taken in self.waiting:  # not started: their offsets were never stored, the next reader takes them
            del self.taken[(taken.dispatch.job_id, taken.dispatch.attempt)]
        self.waiting.clear()
        while self.executor.in_flight() and time.monotonic() < end:
            self._report(self.executor.wait_results(0.1))
            self._beat()

    def close(self) -> None:
        """Leave the group, say this worker stopped (a tombstone), flush the results."""
        self.executor.shutdown(0)
        self.results.flush(10.0)
        self.beats.produce(workers_topic(self.settings), None, self.instance.encode())
        self.beats.flush(5.0)
        self.reader.close()
