"""The view's loop: one read_committed consumer assigned every events partition, folding each into its view store.

The consumer joins no group and commits no offset: its position in partition p is p's view
store's applied offset (+1), written with the folded state in one WriteBatch, so a restart
goes on where the store ended (unless the store was folded from another log, a cluster or a
topic made again: it is wiped then, ``projections.identity``). Records are folded by the one
restorer (``projections.restore``) with the full fold, then retention (``projections.retention``)
runs inside the same step, so a rebuild from offset 0 reaches the same bytes. Stores commit every
COMMIT_RECORDS records or COMMIT_S seconds, whichever comes first, so the view trails the log by a fraction of a second.

A partition's applied offset moves past the transaction markers the consumer has read past
(they carry nothing to fold), so a caught-up view shows no lag.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path


from engine.config import Settings
from engine.contract import messages as m
from engine.errors import ProjectionCorruptedError, RetryableError
from engine.runtime.kafka.admin import log_identity
from engine.runtime.kafka.ports import TopicReader, topic_reader
from projections.evolve import Folded
from projections.identity import matched
from projections.lock import StoreLock, holder_name
from projections.restore import Restorer
from projections.retention import Retention
from projections.store import ProjectionStore, open_store, view_root, view_store_path

log = logging.getLogger("epochq.view")

COMMIT_RECORDS = 5000
COMMIT_S = 0.1
"""A store commits what it folded after this many records or this long, whichever comes first."""
DISCOVER_S = 5.0
"""How often the partition count of the events topic is asked again (a topic grown by an operator)."""
FETCH = 5000
RETRY_S = 1.0
WARN_EVERY_S = 30.0
SEEN_FILE = "seen.json"
"""Beside the stores: per partition, the time of the newest event folded (for ``view status``)."""


@dataclass
class FollowedPartition:
    """One partition as the view follows it."""

    store: ProjectionStore
    restorer: Restorer
    newest_us: int = 0  # occurred_at of the newest event folded
    dirty: bool = False


class ViewFollower:
    """Folds every partition of ``<ns>.events`` into the view stores of ``settings.state_dir`` until stopped."""

    def __init__(self, settings: Settings, lock: StoreLock, keep_finished_us: int):
        self.settings, self.lock = settings, lock
        self.topic = settings.events_topic
        self.keep_finished_us = keep_finished_us
        self.root = view_root(settings.state_dir, settings.namespace)
        self.reader: TopicReader = topic_reader(settings, "view", fetch_wait_ms=50, told=self._told)
        self.followed: dict[int, FollowedPartition] = {}
        self.identity: str | None = None  # of the events topic's log, asked once
        self.stopping = threading.Event()
        self._committed_at = time.monotonic()
        self._pending = 0
        self._warned: dict[str, float] = {}

    def run(self, parent_pid: int | None = None) -> None:
        """Follow until :meth:`stop` (or until ``parent_pid`` is no longer this process's parent)."""
        self.discover()
        log.info("view: folding %d partition(s) of %s into %s", len(self.followed), self.topic, self.root)
        discovered = time.monotonic()
        try:
            while not self.stopping.is_set():
                if parent_pid is not None and os.getppid() != parent_pid:
                    log.info("view: the process that started it is gone; stopping")
                    break
                try:
                    self.step()
                    if time.monotonic() - discovered >= DISCOVER_S:
                        discovered = time.monotonic()
                        self.discover()
                except RetryableError as e:  # the cluster did not answer: the stores keep what they folded
                    self._warn(f"view: {e}; trying again")
                    self.stopping.wait(RETRY_S)
        finally:
            self.close()

    def stop(self) -> None:
        """Ask the loop to end after its current step (safe from a signal handler)."""
        self.stopping.set()

    def discover(self) -> None:
        """Follow the partitions of the events topic not followed yet (TopicMismatchError when it is missing)."""
        partitions = self.reader.partitions(self.topic)
        new = [p for p in partitions if p not in self.followed]
        if new:
            identity, ends = self._log_identity(), self.reader.end_offsets(self.topic, new)
        for p in new:
            store = open_store(view_store_path(self.settings.state_dir, self.settings.namespace, p))
            self._follow(p, matched(store, identity, ends[p], f"view: partition {p}"))
        if new and self.followed.keys() != set(new):
            log.info("view: following new partition(s) %s", ",".join(map(str, new)))

    def _log_identity(self) -> str:
        """The identity of the events topic's log (asked of the cluster the first time)."""
        if self.identity is None:
            self.identity = log_identity(self.settings, self.topic)
        return self.identity

    def step(self) -> int:
        """Fold what arrived (waiting a moment when nothing did); commit when due. How many records."""
        records = self.reader.read(FETCH, 0.1)
        for record in records:
            p = record.partition()
            followed = self.followed.get(p)  # type: ignore[arg-type]
            if followed is not None:
                self._fold(p, followed, record.offset(), record.value())  # type: ignore[arg-type]
        self._pending += len(records)
        if self._pending >= COMMIT_RECORDS or time.monotonic() - self._committed_at >= COMMIT_S:
            self.commit()
        return len(records)

    def commit(self) -> None:
        """Commit every partition's pending fold, its applied offset past the markers the consumer read past."""
        self._skip_markers()
        changed = False
        for followed in self.followed.values():
            if followed.dirty:
                followed.restorer.finish()
                followed.dirty, changed = False, True
        if changed:
            self._write_seen()
        self._pending, self._committed_at = 0, time.monotonic()

    def close(self) -> None:
        """Commit, close every store, leave the log, and let go of the view's lock."""
        try:
            self.commit()
            for followed in self.followed.values():
                followed.store.close()
            self.followed.clear()
            self.reader.close()
        finally:
            self.lock.release()

    def _warn(self, line: str) -> None:
        """Log ``line`` at WARNING, at most once every WARN_EVERY_S for the same line."""
        now = time.monotonic()
        if now - self._warned.get(line, -WARN_EVERY_S) >= WARN_EVERY_S:
            self._warned[line] = now
            log.warning("%s", line)

    def _told(self, line: str) -> None:
        """A read's error: warned (the view reads on)."""
        self._warn(f"view: {line}")

    def _fold(self, p: int, followed: FollowedPartition, offset: int, value: bytes | None) -> None:
        try:
            followed.restorer.feed(((offset, value),))
        except ProjectionCorruptedError as e:
            log.error("view: partition %d corrupt (%s); wiping it and folding from offset 0", p, e)
            self.followed.pop(p)
            self.reader.remove(self.topic, p)
            self._follow(p, followed.store.reset())
            return
        followed.dirty = True

    def _follow(self, p: int, store: ProjectionStore) -> None:
        retention = Retention(self.keep_finished_us)
        restorer = Restorer(store, self.topic, p, commit_every=COMMIT_RECORDS)
        newest_us = _seen(self.root).get(p, 0) if restorer.next_offset else 0
        followed = FollowedPartition(store, restorer, newest_us=newest_us)

        def folded(event: m.Event, result: Folded) -> None:
            followed.newest_us = max(followed.newest_us, event.occurred_at)
            retention.after(restorer.batch, event, result)

        restorer.on_folded = folded
        self.followed[p] = followed
        self.reader.add(self.topic, p, restorer.next_offset)

    def _skip_markers(self) -> None:
        """Record the consumer's position as applied where it lies past the last record folded: what it skipped
        there are commit markers (and aborted records), nothing to fold. Every record it returned is folded."""
        for p, offset in self.reader.positions(self.topic, self.followed).items():
            followed = self.followed[p]
            if offset >= 0 and offset - 1 > followed.restorer.next_offset - 1:
                followed.restorer.batch.last_offset = offset - 1
                followed.dirty = True

    def _write_seen(self) -> None:
        seen = {str(p): f.newest_us for p, f in self.followed.items() if f.newest_us}
        tmp = self.root / (SEEN_FILE + ".tmp")
        tmp.write_text(json.dumps(seen, sort_keys=True))
        tmp.replace(self.root / SEEN_FILE)


def _seen(root: Path) -> dict[int, int]:
    """The newest event time folded per partition, as the view last wrote it (empty when unknown)."""
    try:
        return {int(p): int(us) for p, us in json.loads((root / SEEN_FILE).read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def newest_folded(settings: Settings) -> dict[int, int]:
    """Per partition, the ``occurred_at`` (µs) of the newest event the view of ``settings`` folded."""
    return _seen(view_root(settings.state_dir, settings.namespace))


def view_holder() -> str:
    """How a view process names itself in the view's lock file."""
    return holder_name("epochq view")
