"""``epochq view rebuild [--verify]``: the view folded again from offset 0, the same way the view folds it.

A rebuild folds each events partition with the one restorer and the view's retention into a
fresh store, and records the partition's end as applied (what follows the last record are
commit markers), exactly as a caught-up view does. ``--verify`` rebuilds up to the view's
applied offset beside it and compares key by key; without it, the rebuild replaces the view,
under the view's lock (it refuses while a view process runs).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from engine.config import Settings
from engine.runtime.kafka import KafkaLog
from engine.runtime.kafka.admin import log_identity
from engine.runtime.kafka.ports import topic_reader
from engine.runtime.view.follow import view_holder
from projections.lock import StoreLock
from projections.rebuild import LogReader, Verification, compare
from projections.restore import Restorer
from projections.retention import Retention
from projections.store import ProjectionStore, open_store, view_root, view_store_path


def fold_view(log: LogReader, topic: str, partition: int, path: Path, stop: int, keep_us: int,
              committed: bool = False, identity: str | None = None) -> ProjectionStore:
    """Fold ``topic[partition]`` from offset 0 up to ``stop`` into a new view store at ``path`` (which records the
    log's ``identity``, if given)."""
    shutil.rmtree(path, ignore_errors=True)
    store = open_store(path)
    if identity is not None:
        store.bind(identity)
    retention = Retention(keep_us)
    restorer = Restorer(store, topic, partition, on_folded=lambda e, f: retention.after(restorer.batch, e, f))
    restorer.feed(log.records(topic, partition, 0, stop, committed))
    if stop > restorer.next_offset:
        restorer.batch.last_offset = stop - 1  # the markers after the last record: nothing to fold
    restorer.finish()
    return store


def rebuild_view(settings: Settings, keep_finished_s: float) -> dict[int, int]:
    """Replace every partition's view store by a rebuild from offset 0; the applied offset of each."""
    root = view_root(settings.state_dir, settings.namespace)
    out: dict[int, int] = {}
    with StoreLock.acquire(root, view_holder() + " rebuild"), KafkaLog(settings, "view-rebuild") as log:
        identity = log_identity(settings, settings.events_topic)
        for p in _partitions(settings):
            live = view_store_path(settings.state_dir, settings.namespace, p)
            staging = live.with_name(live.name + ".rebuild")
            store = fold_view(log, settings.events_topic, p, staging, log.end_offset(settings.events_topic, p),
                              round(keep_finished_s * 1e6), identity=identity)
            out[p] = store.applied_offset()
            store.close()
            shutil.rmtree(live, ignore_errors=True)
            staging.rename(live)
    return out


def verify_view(settings: Settings, keep_finished_s: float) -> Iterator[Verification]:
    """Each partition's view store against a rebuild of the log up to its applied offset."""
    with KafkaLog(settings, "view-verify") as log:
        for p in _partitions(settings):
            yield _verify_one(log, settings, p, round(keep_finished_s * 1e6))


def _verify_one(log: LogReader, settings: Settings, p: int, keep_us: int) -> Verification:
    path = view_store_path(settings.state_dir, settings.namespace, p)
    if not path.is_dir():
        return Verification(p, -1, only_rebuilt=[b"(no view store)"])
    live = ProjectionStore(path, read_only=True)
    try:
        applied = live.applied_offset()
        with tempfile.TemporaryDirectory(prefix="epochq-view-verify-") as tmp:
            rebuilt = fold_view(log, settings.events_topic, p, Path(tmp) / "store", applied + 1, keep_us,
                                committed=True)
            try:
                return compare(p, applied, live.items(), rebuilt.items())
            finally:
                rebuilt.close()
    finally:
        live.close()


def _partitions(settings: Settings) -> list[int]:
    with topic_reader(settings, "view-rebuild") as reader:
        return reader.partitions(settings.events_topic)
