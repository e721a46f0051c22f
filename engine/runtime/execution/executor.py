"""What is running in which lane's slots, and how each attempt ended.

It only runs handlers and reports outcomes; the partition owner turns them into events.
The values it takes and gives live in ``verdicts``, one attempt's call order in ``attempt``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import multiprocessing
import queue
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from engine.app import App, TaskSpec
from engine.contract.messages import Payload
from engine.domain.lanes import Lane
from engine.errors import ConfigError, IllegalStateError, ValidationError
from engine.runtime.execution.aio import AsyncRunner
from engine.runtime.execution.attempt import failed_attempt, run_attempt, run_attempt_async, run_in_process
from engine.runtime.execution.context import JobContext
from engine.runtime.execution.outputs import TopicGate
from engine.runtime.execution.lanethreads import LaneThreads
from engine.runtime.execution.verdicts import AttemptOutcome, AttemptOutcomeKind, RunRequest, RunResult, since
from engine.runtime.observe.tracing import run_traced, run_traced_async, tracing

__all__ = ["Executor", "AttemptOutcome", "AttemptOutcomeKind", "RunRequest", "RunResult"]

log = logging.getLogger(__name__)

PROCESS_START_METHOD = "spawn"  # a fresh interpreter: forking a threaded process is unsafe


@dataclass(slots=True)
class _Running:
    request: RunRequest
    deadline: float
    allowed_s: float
    started_ns: int
    grace_s: float | None = None  # set when a cancel was asked for: the deadline is then the grace's end


class Executor:
    """Per-lane worker slots, the attempts running in them, and their results.

    Every attempt runs on its lane's thread pool, so a full BATCH lane never delays HIGH
    work; a ``executor="process"`` task's lane thread hands the call to one shared,
    lazily created process pool. Deadline: the request's, or submit time plus the task
    type's timeout if sooner. A thread cannot be killed: past its deadline the poll reports
    ``TimeoutError`` once, frees the slot and discards the late result (also when the
    result arrived late but before the poll). Lane pools have twice their slots in threads,
    the spare half standing in for stuck handlers; beyond that the lane's free slots shrink.
    """

    def __init__(self, app: App, lane_slots: Mapping[Lane, int], *, process_workers: int | None = None,
                 report: Callable[[tuple[int, AttemptOutcome, float]], None] | None = None,
                 gate: TopicGate | None = None, namespace: str | None = None) -> None:
        self._app = app
        self._gate = gate  # what ctx.produce asks before it stages a record for a topic
        self._namespace = namespace  # whose topics ctx.produce refuses (also in a process-pool worker)
        self._slots = _check_slots(lane_slots)
        self._pools = {lane: LaneThreads(f"epochq-{lane.lower()}", 2 * n)
                       for lane, n in self._slots.items() if n > 0}
        self._process_workers = process_workers
        self._process: ProcessPoolExecutor | None = None
        self._aio: AsyncRunner | None = None
        self._lock = threading.RLock()
        self._results: queue.SimpleQueue[tuple[int, AttemptOutcome, float]] = queue.SimpleQueue()
        self._report = report or self._results.put  # where finished attempts go: the engine's inbox
        self._running: dict[int, _Running] = {}
        self._deadlines: list[tuple[float, int]] = []  # (deadline, token), a heap; finished tokens left lazily
        self._stuck: dict[int, Lane] = {}  # timed out, handler still running
        self._running_in: Counter[Lane] = Counter()  # per lane: len(_running), len(_stuck) kept as counts
        self._stuck_in: Counter[Lane] = Counter()
        self._ready: list[RunResult] = []  # decided at submit: unknown task types
        self._cancels: set[int] = set()  # tokens asked to stop; each attempt's context reads it
        self._progress: dict[int, tuple[float | None, str]] = {}  # token -> the latest unreported progress
        self._progress_taken = 0.0
        self._tokens = itertools.count()
        self._closed = False

    def free_slots(self, lane: Lane) -> int:
        """How many more attempts ``lane`` can start now."""
        with self._lock:
            slots = self._slots.get(lane, 0)
            running, stuck = self._running_in[lane], self._stuck_in[lane]
            return max(0, slots - running - max(0, stuck - slots))

    def submit(self, request: RunRequest) -> None:
        """Start ``request`` in a slot of its lane; ``IllegalStateError`` (a bug of the caller) if none is free.

        An unknown task type takes no slot: its ``invalid`` result is ready at the next poll.
        """
        with self._lock:
            if self._closed:
                raise IllegalStateError("executor is shut down; it accepts no new work")
            spec = self._spec_for(request)
            if spec is None:
                return
            if self.free_slots(request.lane) < 1:
                raise IllegalStateError(f"lane {request.lane} has no free slot for job {request.job_id}")
            self._start(request, spec)

    def submit_many(self, requests: list[RunRequest]) -> None:
        """:meth:`submit` each of ``requests``; async attempts reach the event loop with one wake-up."""
        waking: list[tuple[int, Any, Any, Any]] = []
        with self._lock:
            for request in requests:
                if self._closed:
                    raise IllegalStateError("executor is shut down; it accepts no new work")
                spec = self._spec_for(request)
                if spec is None:
                    continue
                if self.free_slots(request.lane) < 1:
                    raise IllegalStateError(f"lane {request.lane} has no free slot for job {request.job_id}")
                self._start(request, spec, waking)
        if waking:
            self._event_loop().submit_many(waking)

    def _spec_for(self, request: RunRequest) -> TaskSpec | None:
        try:
            return self._app.spec(request.task_type)
        except ValidationError as e:
            self._ready.append(RunResult(request, AttemptOutcome.from_exception(e, 0)))
            return None

    def _start(self, request: RunRequest, spec: TaskSpec, waking: list[Any] | None = None) -> None:
        now = time.time()
        deadline = min(request.deadline, now + spec.timeout)
        token = next(self._tokens)
        self._running[token] = _Running(request, deadline, deadline - now, time.perf_counter_ns())
        heapq.heappush(self._deadlines, (deadline, token))
        self._running_in[request.lane] += 1
        ctx = JobContext(request.job_id, request.tenant, request.task_type, request.attempt, request.epoch,
                         request.partition, request.idempotency_key, deadline, None, token, self._cancels,
                         self._progress, self._gate, None, request.traceparent, request.dependencies,
                         request.replays, self._namespace)
        if spec.is_async:
            item = (token, lambda: run_attempt_async(spec.handler, spec.model, ctx, request.payload), self._report,
                    failed_attempt)
            if tracing():
                item = (token, lambda: run_traced_async(lambda: run_attempt_async(spec.handler, spec.model, ctx,
                                                                                  request.payload), ctx),
                        self._report, failed_attempt)
            if waking is not None:
                waking.append(item)
            else:
                self._event_loop().submit_many([item])
        else:
            self._pools[request.lane].submit(self._work, token, spec, ctx, request.payload)

    def _event_loop(self) -> AsyncRunner:
        if self._aio is None:
            self._aio = AsyncRunner()
        return self._aio

    def _work(self, token: int, spec: TaskSpec, ctx: JobContext, payload: Payload) -> None:
        """A lane thread's job: run the attempt, put its outcome on the results queue."""
        started = time.perf_counter_ns()
        try:
            outcome = self._attempt(spec, ctx, payload) if not tracing() else \
                run_traced(lambda: self._attempt(spec, ctx, payload), ctx)
        except BaseException as e:  # noqa: BLE001 - never lose a result: the slot would be held until the deadline
            outcome = AttemptOutcome.from_exception(e, since(started))
        self._report((token, outcome, time.time()))

    def _attempt(self, spec: TaskSpec, ctx: JobContext, payload: Payload) -> AttemptOutcome:
        if spec.executor == "thread":
            return run_attempt(spec.handler, spec.model, ctx, payload)
        pool = self._process_pool()
        try:
            return pool.submit(run_in_process, spec.handler, spec.model, ctx, payload).result()
        except BrokenProcessPool:
            self._drop_process_pool(pool)
            raise

    def _process_pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._process is None:
                if self._closed:
                    raise IllegalStateError("executor is shut down; no process pool to run in")
                context = multiprocessing.get_context(PROCESS_START_METHOD)
                self._process = ProcessPoolExecutor(max_workers=self._process_workers, mp_context=context)
            return self._process

    def _drop_process_pool(self, pool: ProcessPoolExecutor) -> None:
        """A worker died: the next process attempt starts a new pool."""
        with self._lock:
            self._process = None if self._process is pool else self._process
        pool.shutdown(wait=False, cancel_futures=True)

    def poll_results(self, max_items: int | None = None) -> list[RunResult]:
        """Results ready now, without blocking; attempts past their deadline time out here."""
        limit = sys.maxsize if max_items is None else max_items
        with self._lock:
            out, self._ready = self._ready[:limit], self._ready[limit:]
        while len(out) < limit:
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                break
            settled = self.settle(item)
            out += [settled] if settled else []
        return out + self.expire(limit - len(out))

    def wait_results(self, timeout: float) -> list[RunResult]:
        """Results, blocking up to ``timeout`` seconds for at least one."""
        end = time.monotonic() + timeout
        out = self.poll_results()
        while not out and (left := end - time.monotonic()) > 0:
            try:
                item = self._results.get(timeout=min(left, self._until_next_deadline(), 60.0))
            except queue.Empty:
                item = None
            settled = self.settle(item) if item else None
            out = ([settled] if settled else []) + self.poll_results()
        return out

    def _until_next_deadline(self) -> float:
        return max(0.0, self.next_deadline() - time.time()) + 0.001

    def next_deadline(self) -> float:
        """The soonest deadline of a running attempt (wall-clock seconds; infinity when none runs)."""
        with self._lock:
            heap = self._deadlines
            while heap and heap[0][1] not in self._running:
                heapq.heappop(heap)
            return heap[0][0] if heap else float("inf")

    def settle(self, item: tuple[int, AttemptOutcome, float]) -> RunResult | None:
        """The result for a finished attempt (what went to ``report``); ``None`` when it had already timed out.

        Settling frees the attempt's slot: the engine settles a result as soon as it wakes for it.
        """
        token, outcome, finished_at = item
        with self._lock:
            entry = self._running.pop(token, None)
            self._cancels.discard(token)
            if entry is None:
                lane = self._stuck.pop(token, None)
                if lane is not None:
                    self._stuck_in[lane] -= 1
                log.info("discarded the late result of a timed-out attempt in lane %s", lane)
                return None
            self._running_in[entry.request.lane] -= 1
        if finished_at > entry.deadline:
            outcome = self._late(entry, outcome.duration_us)
        elif entry.grace_s is not None and outcome.kind is not AttemptOutcomeKind.SUCCEEDED:
            outcome = outcome.cancelled()
        return RunResult(entry.request, outcome)

    def _late(self, entry: _Running, duration_us: int) -> AttemptOutcome:
        if entry.grace_s is not None:
            return AttemptOutcome.out_of_grace(entry.grace_s, duration_us)
        return AttemptOutcome.timed_out(entry.allowed_s, duration_us)

    def take_progress(self, every_s: float = 1.0) -> list[tuple[RunRequest, float | None, str]]:
        """The latest progress of each running attempt that reported since the last take, at most every ``every_s``."""
        now = time.monotonic()
        if not self._progress or now - self._progress_taken < every_s:
            return []
        self._progress_taken = now
        reports = {}
        while self._progress:  # popitem is atomic: a report written meanwhile stays for the next take
            token, report = self._progress.popitem()
            reports[token] = report  # popped again only if written again: newer
        with self._lock:
            return [(self._running[t].request, *report) for t, report in reports.items() if t in self._running]

    def cancel(self, job_id: str, attempt: int, grace_s: float) -> bool:
        """Ask ``attempt`` of ``job_id`` to stop: its ``ctx.cancelled`` turns true, an async handler's task
        is cancelled, and past ``grace_s`` seconds it is given up like a timed-out one. False if not running."""
        with self._lock:
            token = next((t for t, e in self._running.items()
                          if e.request.job_id == job_id and e.request.attempt == attempt), None)
            if token is None:
                return False
            entry = self._running[token]
            entry.grace_s = grace_s
            entry.deadline = min(entry.deadline, time.time() + grace_s)
            heapq.heappush(self._deadlines, (entry.deadline, token))
            self._cancels.add(token)
        if self._aio is not None:
            self._aio.cancel(token)  # a no-op unless the attempt is an async task
        return True

    def expire(self, room: int = sys.maxsize) -> list[RunResult]:
        """Time out up to ``room`` attempts past their deadline (each reported once)."""
        now = time.time()
        with self._lock:
            late: list[int] = []
            heap = self._deadlines
            while heap and heap[0][0] <= now and len(late) < room:
                _, token = heapq.heappop(heap)
                if token in self._running:
                    late.append(token)
            return [self._time_out(token) for token in late]

    def _time_out(self, token: int) -> RunResult:
        entry = self._running.pop(token)
        self._cancels.discard(token)
        request, self._stuck[token] = entry.request, entry.request.lane
        self._running_in[request.lane] -= 1
        self._stuck_in[request.lane] += 1
        if entry.grace_s is None:
            log.warning("job %s (%s, attempt %d) timed out after %.3gs", request.job_id,
                        request.task_type, request.attempt, entry.allowed_s)
        else:
            log.warning("job %s (%s, attempt %d) did not stop within its cancel grace of %.3gs", request.job_id,
                        request.task_type, request.attempt, entry.grace_s)
        if self._aio is not None:
            self._aio.cancel(token)
        return RunResult(request, self._late(entry, since(entry.started_ns)))

    def in_flight(self, partition: int | None = None) -> int:
        """How many attempts are running (of ``partition``, or of all partitions)."""
        with self._lock:
            if partition is None:
                return len(self._running)
            return sum(1 for r in self._running.values() if r.request.partition == partition)

    def in_flight_requests(self, partition: int) -> list[RunRequest]:
        """The attempts of ``partition`` still running: what a new owner must re-queue."""
        with self._lock:
            return [r.request for r in self._running.values() if r.request.partition == partition]

    def shutdown(self, grace: float) -> list[RunResult]:
        """Stop accepting work, wait up to ``grace`` seconds, return the results that came in.

        Attempts still running afterwards stay listed by :meth:`in_flight_requests` so the
        owner can hand them back; process-pool workers still busy are terminated, handler
        threads cannot be and are left to finish.
        """
        with self._lock:
            self._closed = True
        out: list[RunResult] = []
        end = time.monotonic() + grace
        while self.in_flight() and (left := end - time.monotonic()) > 0:
            out += self.wait_results(left)
        out += self.poll_results()
        self._stop_pools()
        return out

    def _stop_pools(self) -> None:
        for pool in self._pools.values():
            pool.shutdown()
        if self._aio is not None:
            self._aio.shutdown()
        with self._lock:
            process, self._process = self._process, None
            busy = bool(self._running or self._stuck)
        if process is not None:
            workers = list((getattr(process, "_processes", None) or {}).values())  # no public API < 3.14
            process.shutdown(wait=False, cancel_futures=True)
            for worker in workers if busy else []:
                worker.terminate()


def _check_slots(lane_slots: Mapping[Lane, int]) -> dict[Lane, int]:
    """Slots per lane, validated: whole numbers >= 0, none for the dead-letter queue."""
    slots: dict[Lane, int] = {}
    for key, count in lane_slots.items():
        lane = Lane(key)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigError(f"lane_slots[{lane}]: expected a whole number >= 0, got {count!r}")
        if lane is Lane.DEAD and count:
            raise ConfigError("lane_slots[DEAD]: the dead-letter queue runs nothing; give it 0 slots")
        slots[lane] = count
    return slots
