"""Running an attempt inline: the executor's handler-calling code, on the caller's thread.

The engine's executor hands each attempt to a lane thread (or the event loop, or a process
pool) which calls ``engine.runtime.execution.attempt.run_attempt``; here the same function
is called at once, so an attempt ends before the test's next line. The handler gets the same
``JobContext``; the attempt's deadline is wall-clock time (``ctx.deadline``), and an attempt
that ran past its task type's timeout is reported as timed out, as the executor reports it.
An async handler runs on an event loop of the runner's own, in a thread of its own, so a test that
already runs a loop on its thread (pytest-asyncio, a notebook, a browser driver) can use it too.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

from engine.app import App
from engine.domain.lanes import Lane
from engine.errors import ValidationError
from engine.runtime.execution.attempt import run_attempt, run_attempt_async
from engine.runtime.execution.context import JobContext
from engine.runtime.execution.verdicts import AttemptOutcome, RunRequest, RunResult
from engine.runtime.observe.tracing import run_traced, run_traced_async


class InlineRunner:
    """Runs one attempt to its end on the calling thread and says how it ended."""

    def __init__(self, app: App, namespace: str = "epochq"):
        self.app = app
        self.namespace = namespace  # whose topics ctx.produce refuses, as an engine of that namespace does
        self._tokens = itertools.count()
        self._cancels: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: ThreadPoolExecutor | None = None
        self._done: list[RunResult] = []

    def start(self, request: RunRequest, now: int) -> None:
        """Run the attempt now, to its end; its result is ready at once (``finished``)."""
        self._done.append(self.run(request))

    def finished(self, now: int) -> list[RunResult]:
        """The attempts run since the last call."""
        done, self._done = self._done, []
        return done

    def running(self, lane: Lane) -> int:
        """None: an attempt ends before ``start`` returns."""
        return 0

    def next_finish(self) -> int | None:
        """None: nothing is ever under way."""
        return None

    def run(self, request: RunRequest) -> RunResult:
        """The attempt's result: the handler's outcome, ``invalid`` for an unknown task type, or a timeout."""
        try:
            spec = self.app.spec(request.task_type)
        except ValidationError as e:
            return RunResult(request, AttemptOutcome.from_exception(e, 0))
        started = time.time()
        deadline = min(request.deadline, started + spec.timeout)
        ctx = JobContext(request.job_id, request.tenant, request.task_type, request.attempt, request.epoch,
                         request.partition, request.idempotency_key, deadline, None, next(self._tokens),
                         self._cancels, None, _traceparent=request.traceparent,
                         _dependencies=request.dependencies, _replays=request.replays, _namespace=self.namespace)
        if spec.is_async:
            outcome = self._on_loop_thread().submit(
                lambda: self._event_loop().run_until_complete(
                    run_traced_async(lambda: run_attempt_async(spec.handler, spec.model, ctx, request.payload),
                                     ctx))).result()
        else:
            outcome = run_traced(lambda: run_attempt(spec.handler, spec.model, ctx, request.payload), ctx)
        if time.time() > deadline:
            outcome = AttemptOutcome.timed_out(deadline - started, outcome.duration_us)
        return RunResult(request, outcome)

    def _on_loop_thread(self) -> ThreadPoolExecutor:
        if self._loop_thread is None:
            self._loop_thread = ThreadPoolExecutor(1, thread_name_prefix="testengine-async")
        return self._loop_thread

    def _event_loop(self) -> asyncio.AbstractEventLoop:  # called on the loop thread only
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def close(self) -> None:
        """Close the event loop of async handlers and its thread, if they were made."""
        if self._loop_thread is not None:
            loop, self._loop = self._loop, None
            if loop is not None:
                self._loop_thread.submit(loop.close).result()
            self._loop_thread.shutdown()
            self._loop_thread = None
