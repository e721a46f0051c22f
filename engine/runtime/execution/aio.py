"""``async def`` handlers: one asyncio event loop in a thread of its own, each attempt a task.

An async attempt costs no thread of its own and no hand-off per job: the engine queues the
attempts it starts in a tick and wakes the event loop once for all of them; each attempt
reports its outcome through the same callback the thread lanes use.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

Report = Callable[[tuple[int, Any, float]], None]


class AsyncRunner:
    """An event loop thread running attempts as tasks; started on first use."""

    def __init__(self, name: str = "epochq-async"):
        self._loop = asyncio.new_event_loop()
        self._pending: collections.deque[
            tuple[int, Callable[[], Coroutine[Any, Any, Any]], Report, Callable[[BaseException], Any]]
        ] = collections.deque()
        self._lock = threading.Lock()
        self._woken = False
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit_many(self, attempts: list[tuple[int, Callable[[], Coroutine[Any, Any, Any]], Report,
                                              Callable[[BaseException], Any]]]) -> None:
        """Run each ``attempt()`` as a task; ``report((token, outcome, finished_at))`` when it ends.

        Each item is ``(token, attempt, report, on_error)``; the loop is woken once for all of them."""
        self._pending.extend(attempts)
        with self._lock:
            if self._woken:
                return
            self._woken = True
        self._loop.call_soon_threadsafe(self._start_pending)

    def cancel(self, token: int) -> None:
        """Cancel the attempt's task if it still runs (asked to stop, or past its deadline)."""
        self._loop.call_soon_threadsafe(self._cancel, token)

    def running(self) -> int:
        """Attempts whose task has not ended."""
        return len(self._tasks) + len(self._pending)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel every task and stop the loop."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop)
            self._thread.join(timeout)

    # --- on the loop's thread -----------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        self._loop.close()

    def _start_pending(self) -> None:
        with self._lock:
            self._woken = False
        while self._pending:
            token, attempt, report, on_error = self._pending.popleft()
            task = self._loop.create_task(attempt())
            self._tasks[token] = task
            task.add_done_callback(functools.partial(self._done, token, report=report, on_error=on_error))

    def _done(self, token: int, task: asyncio.Task[Any], report: Report,
              on_error: Callable[[BaseException], Any]) -> None:
        self._tasks.pop(token, None)
        # cancelled: asked to stop, or past its deadline (the executor then drops this report as late)
        error: BaseException | None = asyncio.CancelledError() if task.cancelled() else task.exception()
        outcome = on_error(error) if error is not None else task.result()
        report((token, outcome, time.time()))

    def _cancel(self, token: int) -> None:
        task = self._tasks.get(token)
        if task is not None:
            task.cancel()

    def _stop(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._loop.stop()
