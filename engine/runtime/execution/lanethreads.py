"""The worker threads of one lane: started as work arrives, up to a limit, fed from one queue.

``concurrent.futures.ThreadPoolExecutor`` does the same with a Future, a Condition and a
Python-level semaphore per call; the executor needs none of them (each attempt reports
through the results queue), and at hundreds of starts per second those were 7 % of the
engine loop. Threads are daemons: a handler stuck past its deadline never holds the
process at exit.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any
from engine.errors import ConfigError, IllegalStateError

log = logging.getLogger(__name__)

_STOP = None


class LaneThreads:
    """At most ``limit`` threads running submitted calls in arrival order."""

    def __init__(self, name: str, limit: int):
        if limit < 1:
            raise ConfigError(f"{name}: a lane needs at least one thread, got {limit}")
        self.name = name
        self.limit = limit
        self._queue: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work, less the queued calls already promised to them
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on a lane thread: an idle one, else a new one while under the limit."""
        with self._lock:
            if self._closed:
                raise IllegalStateError(f"{self.name}: shut down, accepts no new work")
            self._queue.put((fn, args))
            if self._idle > 0:
                self._idle -= 1
            elif len(self._threads) < self.limit:
                thread = threading.Thread(target=self._serve, name=f"{self.name}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _serve(self) -> None:
        while (item := self._queue.get()) is not _STOP:
            fn, args = item
            try:
                fn(*args)
            except Exception:  # the executor's calls report their own errors; never lose the thread
                log.exception("%s: a call raised", self.name)
            with self._lock:
                self._idle += 1

    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def shutdown(self) -> None:
        """Drop calls not yet started and let every thread end after its current call."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            for _ in self._threads:
                self._queue.put(_STOP)
