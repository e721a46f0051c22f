"""Replay a partition's events from offset 0 into a fresh store, and compare it with the live one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import Settings
from engine.contract.codec import decode_event_at
from engine.errors import DecodeError
from engine.runtime import kafka
from engine.runtime.joblog import scan_partition
from projections.batch import Batch
from projections.evolve import fold
from projections.store import ProjectionStore, open_store, store_path

Progress = Callable[[int, int, int], None]  # (partition, offset reached, end offset)
COMMIT_EVERY = 5000


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


def rebuild_into(settings: Settings, partition: int, path: Path, stop: int | None = None,
                 progress: Progress | None = None) -> ProjectionStore:
    """Fold events[partition] from offset 0 (up to ``stop``, exclusive) into a new store at ``path``."""
    shutil.rmtree(path, ignore_errors=True)
    store = open_store(path)
    consumer = kafka.events_reader(settings, "rebuild")
    try:
        end = stop if stop is not None else kafka.end_offsets(consumer, settings.events_topic, [partition])[partition]
        batch = Batch(store)
        for n, (offset, _, value) in enumerate(scan_partition(consumer, settings.events_topic, partition, 0, end)):
            _fold_raw(batch, settings.events_topic, partition, offset, value)
            if n % COMMIT_EVERY == COMMIT_EVERY - 1:
                batch.commit()
                progress and progress(partition, offset + 1, end)
        batch.commit()
        progress and progress(partition, end, end)
    finally:
        consumer.close()
    return store


def _fold_raw(batch: Batch, topic: str, partition: int, offset: int, value: bytes) -> None:
    try:
        fold(batch, decode_event_at(value, topic, partition, offset), offset)
    except DecodeError:
        batch.last_offset = offset


def rebuild_live(settings: Settings, partition: int, progress: Progress | None = None) -> int:
    """Replace the live store of ``partition`` by a rebuild; returns its applied offset."""
    live = store_path(settings.state_dir, settings.namespace, partition)
    staging = live.with_name(live.name + ".rebuild")
    store = rebuild_into(settings, partition, staging, progress=progress)
    applied = store.applied_offset()
    store.close()
    shutil.rmtree(live, ignore_errors=True)
    staging.rename(live)
    return applied


def verify(settings: Settings, partition: int, progress: Progress | None = None) -> Verification:
    """Rebuild ``partition`` up to the live store's applied offset and compare them key by key."""
    live = ProjectionStore(store_path(settings.state_dir, settings.namespace, partition), read_only=True)
    try:
        applied = live.applied_offset()
        with tempfile.TemporaryDirectory(prefix="epochq-verify-") as tmp:
            rebuilt = rebuild_into(settings, partition, Path(tmp) / "store", applied + 1, progress)
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
    a, b = dict(live), dict(rebuilt)
    result.keys_compared = len(a.keys() | b.keys())
    result.only_live = sorted(a.keys() - b.keys())
    result.only_rebuilt = sorted(b.keys() - a.keys())
    result.different = sorted(key for key in a.keys() & b.keys() if a[key] != b[key])
    return result
