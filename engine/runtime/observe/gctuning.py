"""The garbage collector of an engine process: fewer full collections, and shorter ones.

The engine's objects seldom form reference cycles (reference counting frees them), yet
with CPython's default thresholds (700, 10, 10) a full collection ran every few seconds at
1,000 jobs/s, and each one walked every live object, the 40,000-odd of the imported modules
included: 60-180 ms pauses that went straight into the lateness tail (docs/time.md).
``epochq engine run`` therefore freezes what exists once the engine is set up (those
objects live as long as the process anyway) and collects the young generation less often.
``epochq_gc_pause_seconds`` shows the pauses that remain.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

THRESHOLDS = (10_000, 20, 20)  # allocations before a young collection; young ones per middle; middle per full


def tune_for_latency() -> None:
    """Collect once, freeze the survivors out of every later collection, raise the thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


class PauseWatch:
    """Reports every collection's duration and generation to ``record`` while installed."""

    def __init__(self, record: Callable[[int, float], None]):
        self._record = record
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._record(info["generation"], time.perf_counter() - self._started)

    def install(self) -> None:
        """Start watching (the collector's callbacks are process-wide)."""
        gc.callbacks.append(self)

    def remove(self) -> None:
        """Stop watching."""
        if self in gc.callbacks:
            gc.callbacks.remove(self)
