"""Warm standbys: read-only copies of the partitions this instance does not own.

With ``epochq engine run --standby`` an instance follows the events topic of every partition
it does not hold and folds what other owners commit into a store at the very path an owner
would use, with the restorer a takeover uses. So when the group assigns it one of them, the
owner's set-up finds the copy there and restores only what was committed since (Kafka
Streams' standby replicas, ``num.standby.replicas``). A copy is never written by a
decision: only committed events reach it, in log order, so it holds exactly what a rebuild
of the same prefix holds.

A copy holds its store's lock (projections/lock.py) as long as it has the store open, so a
``projections rebuild`` refuses to replace it meanwhile. The loop gives the standbys a slice
of each tick (``budget_s``); a partition it is assigned is handed over (its pending batch
committed, its store closed and its lock let go) before the owner takes the lock and opens
it. A store whose lock someone else holds (an owner in another process of the same state
directory, a rebuild) is tried again every RETRY_S. A copy folded from another log (a cluster or a topic made
again: ``projections.identity``) is wiped when it is opened, and follows the log from offset 0.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from engine.config import Settings
from engine.errors import ProjectionCorruptedError, StoreLockedError
from engine.runtime.kafka.ports import EventLog
from engine.runtime.kafka.admin import log_identity
from projections.identity import matched
from projections.lock import holder_name
from projections.profile import owner_profile
from projections.restore import Restorer
from projections.store import ProjectionStore, open_locked, store_path

log = logging.getLogger("epochq.standby")

BATCH = 5000
RETRY_S = 5.0


@dataclass
class Copy:
    """One partition followed as a standby: its store and the restorer folding into it."""

    store: ProjectionStore
    restorer: Restorer


class Standbys:
    """The standby copies of one engine instance, folded a slice of time at a time."""

    def __init__(self, settings: Settings, events: EventLog, partitions: int, owner_id: str):
        self.settings, self.events = settings, events
        self.holder = holder_name("standby copy of", owner_id)
        self.topic = settings.events_topic
        self.all = set(range(partitions))
        self.copies: dict[int, Copy] = {}
        self.identity: str | None = None  # of the events topic's log, asked once
        self._retry_at: dict[int, float] = {}

    def follow(self, held: set[int]) -> None:
        """Hand over the copies of partitions now ``held``; start following the others."""
        for p in sorted(self.copies.keys() & held):
            self._release(p)
        now = time.monotonic()
        for p in sorted(self.all - held - self.copies.keys()):
            if now >= self._retry_at.get(p, 0.0):
                self._open(p)

    def step(self, budget_s: float) -> int:
        """Fold what the owners committed, for at most about ``budget_s``; how many records."""
        if not self.copies:
            return 0
        deadline, folded = time.monotonic() + budget_s, 0
        while True:
            messages = self.events.read(BATCH, 0)
            wiped: set[int] = set()
            for msg in messages:
                p: int = msg.partition()  # type: ignore[assignment]  # a record read has its place
                copy = self.copies.get(p)
                if copy is None or p in wiped:
                    continue
                try:
                    folded += copy.restorer.feed(((msg.offset(), msg.value()),))  # type: ignore[arg-type]
                except ProjectionCorruptedError as e:
                    wiped.add(p)  # the rest of this batch is ahead of the fresh store
                    self._wipe(p, e)
            if not messages or time.monotonic() >= deadline:
                break
        for copy in self.copies.values():
            copy.restorer.finish()
        return folded

    def close(self) -> None:
        """Commit and close every copy."""
        for p in list(self.copies):
            self._release(p)

    def _open(self, p: int) -> None:
        try:
            identity, end = self._log_identity(), self.events.end([p])[p]
            store = open_locked(store_path(self.settings.state_dir, self.settings.namespace, p), self.holder)
        except StoreLockedError as e:  # an owner in another process, or a rebuild: try again later
            log.debug("partition %d: standby copy not opened (%s)", p, e)
            self._retry_at[p] = time.monotonic() + RETRY_S
            return
        except Exception as e:  # noqa: BLE001 - an unreadable store: try again later
            log.warning("partition %d: standby copy not opened (%s)", p, e)
            self._retry_at[p] = time.monotonic() + RETRY_S
            return
        self._follow(p, matched(store, identity, end, f"partition {p} (standby copy)"))

    def _log_identity(self) -> str:
        """The identity of the events topic's log (asked of the cluster the first time)."""
        if self.identity is None:
            self.identity = log_identity(self.settings, self.topic)
        return self.identity

    def _follow(self, p: int, store: ProjectionStore) -> None:
        restorer = Restorer(store, self.topic, p, profile=owner_profile(self.settings))
        self.copies[p] = Copy(store, restorer)
        self.events.add(p, restorer.next_offset)
        log.info("partition %d: following as a standby from offset %d", p, restorer.next_offset)

    def _release(self, p: int) -> None:
        copy = self.copies.pop(p)
        try:
            self.events.remove(p)
        except Exception as e:  # noqa: BLE001 - not assigned: nothing to undo
            log.debug("partition %d: standby unassign skipped: %s", p, e)
        copy.restorer.finish()
        offset = copy.restorer.next_offset
        copy.store.close()  # and its lock, before the owner takes it
        log.info("partition %d: standby copy handed over at offset %d", p, offset)

    def _wipe(self, p: int, error: ProjectionCorruptedError) -> None:
        log.error("partition %d: standby copy corrupt (%s); wiping it and following from offset 0", p, error)
        copy = self.copies.pop(p)
        self.events.remove(p)
        self._follow(p, copy.store.reset())  # its lock held throughout
