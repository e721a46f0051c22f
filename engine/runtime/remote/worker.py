"""A remote worker: runs the attempts dispatched to its pool and reports each back to the owner.

``epochq worker run app:app --pool P --concurrency N``. It reads ``<ns>.dispatch.<P>`` in the consumer
group ``<ns>.pool.<P>`` (read_committed), runs each attempt with the engine's own executor (timeouts,
progress, cancels as in process), sends each result as a ``ReportAttempt`` command keyed by the job id
(so it is decided by the job's owner, in the transaction that commits its offset), and publishes a
heartbeat to ``<ns>.workers`` every few seconds naming the fencing token of each attempt it runs: what
renews their leases. It never writes ``<ns>.events``. Protocol: docs/workers.md.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from engine.app import App
from engine.clock import now_us
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import encode_command
from engine.contract.heartbeat import LaneSlots, LeasedJob, WorkerRow, encode_heartbeat
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.errors import ConfigError, DecodeError
from engine.runtime.execution.executor import Executor
from engine.runtime.execution.verdicts import RunRequest, RunResult
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


@dataclass(slots=True)
class Taken:
    """One attempt this worker took: its dispatch and what it runs as."""

    dispatch: Dispatch
    request: RunRequest
    progress: float | None = None
    message: str = ""


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
        self.reader = dispatch_reader(settings, topic, f"{settings.namespace}.pool.{pool}")
        self.executor = Executor(app, {lane: concurrency for lane in RUNNABLE_LANES}, gate=KafkaTopicGate(settings),
                                 namespace=settings.namespace)
        self.results = plain.command_writer(settings)
        self.signer = worker_signer(settings)
        self.beats = plain.writer(settings, {"acks": "all", "linger.ms": 0, "message.timeout.ms": 10_000})
        self.every_s = beat_every(app, pool)
        self.started_at_us = now_us()
        self.taken: dict[tuple[str, int], Taken] = {}  # (job id, attempt) -> running, or waiting for a slot
        self.waiting: collections.deque[Taken] = collections.deque()
        self._paused = False
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
        """One round: take what fits, start it, report what finished, beat if due."""
        self._take(self._read())
        self._start_waiting()
        self._report(self.executor.wait_results(0.01) if self.taken else [])
        self._beat()

    def _room(self) -> int:
        return self.concurrency - len(self.taken)

    def _read(self) -> list[Record]:
        room = self._room()
        if room <= 0:
            if not self._paused:
                self._paused = self.reader.pause_all()
            self.reader.idle(0.05 if not self.taken else 0)
            return []
        if self._paused:
            self.reader.resume_all()
            self._paused = False
        if self.taken:
            return self.reader.read(room, 0)
        return self.reader.read_soon(room, IDLE_WAIT_S)  # idle: wake with the first record

    def _take(self, messages: list[Record]) -> None:
        now = time.time()
        for msg in messages:
            try:
                d = decode_message(msg.value())
            except DecodeError as e:
                log.warning("skipped a record of %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), e)
                continue
            if isinstance(d, CancelAttempt):
                self._cancel(d)
                continue
            if d.dispatched_at_us / 1e6 + d.lease_s - self.every_s < now:  # no heartbeat can renew it in time
                self.skipped += 1
                log.info("job %s attempt %d: dispatched %.1fs ago, its lease (%.3gs) all but lapsed; skipped (the "
                         "owner retries it)", d.job_id, d.attempt, now - d.dispatched_at_us / 1e6, d.lease_s)
                continue
            taken = Taken(d, request_of(d, now))
            self.taken[(d.job_id, d.attempt)] = taken
            self.waiting.append(taken)
            if d.dispatched_at_us / 1e6 + d.lease_s - 2 * self.every_s < now:
                self._next_beat = 0.0  # little of its lease is left: the owner hears of it at once

    def _cancel(self, c: CancelAttempt) -> None:
        """Ask a running attempt to stop (``ctx.cancelled``), as the owner's cancel says; one waiting for a slot is
        dropped (its lease lapses and the owner, which asked it to stop, records it cancelled)."""
        taken = self.taken.get((c.job_id, c.attempt))
        if taken is None or taken.dispatch.fencing_token != c.fencing_token:
            return
        if taken in self.waiting:
            self.waiting.remove(taken)
            del self.taken[(c.job_id, c.attempt)]
            return
        log.info("job %s attempt %d: cancel asked (grace %.3gs)", c.job_id, c.attempt, c.grace_s)
        self.executor.cancel(c.job_id, c.attempt, c.grace_s)

    def _start_waiting(self) -> None:
        while self.waiting and self.executor.free_slots(self.waiting[0].request.lane) > 0:
            self.executor.submit(self.waiting.popleft().request)

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
        running = len(self.taken)
        jobs = [LeasedJob(t.dispatch.job_id, t.dispatch.fencing_token, t.progress, t.message)
                for t in self.taken.values()]
        return WorkerRow(self.instance, socket.gethostname(), os.getpid(), self.started_at_us, now_us(), [],
                         [LaneSlots("ANY", running, max(0, self.concurrency - running))],
                         sorted({job_id for job_id, _ in self.taken}),
                         self.every_s, task_types=self.task_types, pool=self.pool, jobs=jobs)

    def _drain(self, grace_s: float) -> None:
        end = time.monotonic() + grace_s
        self.waiting.clear()  # not started: their leases lapse and the owner retries them
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
