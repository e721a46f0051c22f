"""Replay a partition's events from offset 0 into a fresh store, and compare it with the live one.

The log is read through a :class:`LogReader` (the runtime's Kafka adapter implements it),
and folded by the same :class:`~projections.restore.Restorer` a live owner restores with.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from engine.config import Settings
from engine.contract.learned import skipped_line
from projections.lock import StoreLock, holder_name
from projections.profile import FULL, Profile, owner_profile
from projections.restore import Restorer
from projections.store import LOG_KEY, ProjectionStore, open_store, store_path

Progress = Callable[[int, int, int], None]  # (partition, offset reached, end offset)
PROGRESS_EVERY = 5000


class LogReader(Protocol):
    """Reads committed records of one topic partition: the role the Kafka adapter plays."""

    def end_offset(self, topic: str, partition: int) -> int:
        """The offset after the last record now."""

    def records(self, topic: str, partition: int, start: int, stop: int,
                committed: bool = False) -> Iterator[tuple[int, bytes | None]]:
        """``(offset, value)`` of every committed record in ``[start, stop)``, in order.

        ``committed``: the caller knows every record before ``stop`` was committed (a live store
        applied them), so the reader waits for them rather than stopping after a quiet second:
        a transaction's commit markers reach the partitions a moment after the commit returns.
        """

logger = logging.getLogger("epochq.rebuild")


@dataclass
class Verification:
    """The difference between a live store and a rebuild of the same log prefix."""

    partition: int
    applied_offset: int
    keys_compared: int = 0
    only_live: list[bytes] = field(default_factory=list)
    only_rebuilt: list[bytes] = field(default_factory=list)
    different: list[bytes] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        """Whether the two stores hold exactly the same keys and values."""
        return not (self.only_live or self.only_rebuilt or self.different)


def rebuild_into(log: LogReader, topic: str, partition: int, path: Path, stop: int | None = None,
                 progress: Progress | None = None, committed: bool = False, profile: Profile = FULL) -> ProjectionStore:
    """Fold ``topic[partition]`` from offset 0 (up to ``stop``, exclusive) into a new store at ``path``."""
    shutil.rmtree(path, ignore_errors=True)
    store = open_store(path)
    end = stop if stop is not None else log.end_offset(topic, partition)
    restorer = Restorer(store, topic, partition, profile=profile)
    restorer.feed(_reporting(log.records(topic, partition, 0, end, committed), partition, end, progress))
    restorer.finish()
    if restorer.unknown_types:  # a log written by a newer release: its new types are not folded
        logger.warning("%s[%d]: %s", topic, partition, skipped_line(restorer.unknown_types))
    if progress:
        progress(partition, end, end)
    return store


def _reporting(records: Iterator[tuple[int, bytes | None]], partition: int, end: int,
               progress: Progress | None) -> Iterator[tuple[int, bytes | None]]:
    for n, (offset, value) in enumerate(records, 1):
        yield offset, value
        if progress and n % PROGRESS_EVERY == 0:
            progress(partition, offset + 1, end)


@contextmanager
def holding(settings: Settings, partitions: list[int]) -> Iterator[None]:
    """Hold the locks of the stores of ``partitions``: all of them, or none and StoreLockedError.

    Held from before a staging store is built until the rebuild has replaced the live one, so
    an engine, a standby or another rebuild that has one of them open makes the rebuild refuse
    before it touches anything, and none of them can open a store while it is being replaced.
    """
    holder = holder_name("epochq projections rebuild")
    with ExitStack() as stack:
        for p in partitions:
            stack.enter_context(StoreLock.acquire(store_path(settings.state_dir, settings.namespace, p), holder))
        yield


def rebuild_live(log: LogReader, settings: Settings, partition: int, progress: Progress | None = None) -> int:
    """Replace the live store of ``partition`` by a rebuild, under its lock; returns its applied offset."""
    with holding(settings, [partition]):
        return replace_store(log, settings, partition, progress)


def replace_store(log: LogReader, settings: Settings, partition: int, progress: Progress | None = None) -> int:
    """Replace the live (owner's) store of ``partition`` by a rebuild of its write model; the caller holds its
    lock (:func:`holding`)."""
    live = store_path(settings.state_dir, settings.namespace, partition)
    staging = live.with_name(live.name + ".rebuild")
    store = rebuild_into(log, settings.events_topic, partition, staging, progress=progress,
                         profile=owner_profile(settings))
    applied = store.applied_offset()
    store.close()
    shutil.rmtree(live, ignore_errors=True)
    staging.rename(live)
    return applied


def verify(log: LogReader, settings: Settings, partition: int, progress: Progress | None = None) -> Verification:
    """Rebuild the write model of ``partition`` up to the live store's applied offset and compare them key by key."""
    live = ProjectionStore(store_path(settings.state_dir, settings.namespace, partition), read_only=True)
    try:
        applied = live.applied_offset()
        with tempfile.TemporaryDirectory(prefix="epochq-verify-") as tmp:
            rebuilt = rebuild_into(log, settings.events_topic, partition, Path(tmp) / "store", applied + 1, progress,
                                   committed=True, profile=owner_profile(settings))
            try:
                return compare(partition, applied, live.items(), rebuilt.items())
            finally:
                rebuilt.close()
    finally:
        live.close()


def compare(partition: int, applied: int, live: Iterator[tuple[bytes, bytes]],
            rebuilt: Iterator[tuple[bytes, bytes]]) -> Verification:
    """Key-by-key comparison of two stores' contents."""
    result = Verification(partition, applied)
    a, b = _folded(live), _folded(rebuilt)
    result.keys_compared = len(a.keys() | b.keys())
    result.only_live = sorted(a.keys() - b.keys())
    result.only_rebuilt = sorted(b.keys() - a.keys())
    result.different = sorted(key for key in a.keys() & b.keys() if a[key] != b[key])
    return result


def _folded(items: Iterator[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """A store's pairs but the log identity it records (a rebuild beside it records none)."""
    pairs = dict(items)
    pairs.pop(LOG_KEY, None)
    return pairs
