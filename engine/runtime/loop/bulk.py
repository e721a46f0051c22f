"""Restores too long for the loop: a process per partition folds the log into its store, then hands it on.

An assigned partition whose store lacks at least ``min_events`` events (a takeover on a machine
without a copy, say) is restored by a process of its own, up to the end of the log as it was
then, while the loop goes on with everything else; up to one such process per core runs at a
time. When it ends, the owner opens the store as usual and restores in the loop only what was
committed meanwhile. A partition revoked or lost meanwhile has its process killed (each commit
of the store is one WriteBatch with its offset, so what the process wrote stands). A process
that fails leaves the partition to the loop's own restore.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

from engine.config import Settings
from engine.runtime.rebuilds import restore_store
from projections.store import ProjectionStore

log = logging.getLogger("epochq.lifecycle")

MIN_EVENTS = 100_000
"""Below this lag, a restore in the loop ends sooner than a process starts (about 1 s)."""


class BulkRestores:
    """The restore processes of one engine instance, by partition."""

    def __init__(self, settings: Settings, min_events: int = MIN_EVENTS, processes: int | None = None):
        self.settings, self.min_events = settings, min_events
        self.processes = processes or os.cpu_count() or 1
        self._running: dict[int, tuple[BaseProcess, float]] = {}
        self._tried: set[int] = set()
        self._context = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive a fork

    def busy(self, p: int) -> bool:
        """Whether a process still restores ``p`` (one that ended is reaped and logged)."""
        entry = self._running.get(p)
        if entry is None:
            return False
        process, started = entry
        if process.is_alive():
            return True
        del self._running[p]
        process.join()
        took = time.monotonic() - started
        if process.exitcode == 0:
            log.info("partition %d: restore process done in %.1f s", p, took)
        else:
            log.warning("partition %d: restore process failed (exit %s); restoring in the loop", p, process.exitcode)
        return False

    def may_begin(self, p: int) -> bool:
        """Whether ``p`` could be handed to a process now (not tried since it was assigned, a slot free)."""
        return p not in self._tried and len(self._running) < self.processes

    def begin(self, p: int, lag: int, target: int) -> bool:
        """Start a process for ``p`` if its store lacks at least ``min_events`` events; whether it started."""
        self._tried.add(p)
        if lag < self.min_events:
            return False
        process = self._context.Process(target=restore_store, args=(self.settings, p, target),
                                        name=f"epochq-restore-p{p}", daemon=True)
        process.start()
        self._running[p] = (process, time.monotonic())
        log.info("partition %d: %d events to restore; a process of its own restores them up to offset %d",
                 p, lag, target)
        return True

    def forget(self, p: int) -> None:
        """``p`` is no longer held: kill its process, if any; a later assignment may start one again."""
        self._tried.discard(p)
        entry = self._running.pop(p, None)
        if entry is not None:
            entry[0].kill()
            entry[0].join(5)
            log.info("partition %d: restore process stopped", p)

    def close(self) -> None:
        """Kill every restore process (the instance is leaving)."""
        for p in list(self._running):
            self.forget(p)


def applied_offset_at(path: Path) -> int:
    """The applied offset of the store at ``path`` (-1 when there is none yet), read without holding it."""
    if not path.is_dir():
        return -1
    try:
        store = ProjectionStore(path, read_only=True)
    except Exception:  # noqa: BLE001 - unreadable: the owner's open_store wipes and restores it
        return -1
    try:
        return store.applied_offset()
    finally:
        store.close()
