"""Rebuilding or verifying several partitions at once: a process per partition, ``workers`` at a time.

A partition's rebuild is one Python thread's work (decode and fold, about 20 µs of CPU per
event), so ``projections rebuild --all`` runs partitions in parallel processes, each with its
own consumer and its own store, and the parent draws one progress bar over all of them.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from engine.config import Settings
from engine.runtime.kafka import KafkaLog
from projections.rebuild import Verification, replace_store, verify
from projections.restore import Restorer
from projections.lock import holder_name
from projections.profile import owner_profile
from projections.store import open_locked, store_path

Overall = Callable[[int, int], None]
"""Called with (offsets reached, offsets in all) over every partition, while they run and at the end."""

REFRESH_S = 0.5
_reached: Any = None  # in a worker: the shared array of offsets reached, one slot per partition asked for


def default_workers(partitions: int) -> int:
    """One process per core, no more than there are partitions."""
    return max(1, min(os.cpu_count() or 1, partitions))


def rebuild_each(settings: Settings, partitions: list[int], workers: int,
                 overall: Overall | None = None) -> Iterator[tuple[int, int]]:
    """Replace each partition's live store by a rebuild (the caller holds their locks); yields as each ends."""
    yield from _each(_rebuild_one, settings, partitions, workers, overall)


def verify_each(settings: Settings, partitions: list[int], workers: int,
                overall: Overall | None = None) -> Iterator[tuple[int, Verification]]:
    """Rebuild each partition beside its live store and compare; yields (partition, verification) as each ends."""
    yield from _each(_verify_one, settings, partitions, workers, overall)


def _each(step: Callable[[Settings, int, int], Any], settings: Settings, partitions: list[int], workers: int,
          overall: Overall | None) -> Iterator[tuple[int, Any]]:
    with KafkaLog(settings, "rebuild") as log:
        total = sum(log.end_offset(settings.events_topic, p) for p in partitions)
    context = multiprocessing.get_context("spawn")  # librdkafka's threads do not survive a fork
    reached = context.Array("q", len(partitions))
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_share, initargs=(reached,)) as pool:
        pending: dict[Future[Any], int] = {pool.submit(step, settings, p, slot): p
                                           for slot, p in enumerate(partitions)}
        while pending:
            done, _ = wait(pending, timeout=REFRESH_S, return_when=FIRST_COMPLETED)
            if overall is not None:
                overall(min(sum(reached[:]), total), total)
            for future in done:
                yield pending.pop(future), future.result()


def _share(reached: Any) -> None:
    global _reached
    _reached = reached


def _rebuild_one(settings: Settings, partition: int, slot: int) -> int:
    with KafkaLog(settings, "rebuild") as log:
        return replace_store(log, settings, partition, _reporter(slot))


def _verify_one(settings: Settings, partition: int, slot: int) -> Verification:
    with KafkaLog(settings, "rebuild") as log:
        return verify(log, settings, partition, _reporter(slot))


def _reporter(slot: int) -> Callable[[int, int, int], None]:
    def report(_partition: int, offset: int, _end: int) -> None:
        _reached[slot] = offset

    return report


def restore_store(settings: Settings, partition: int, target: int) -> None:
    """Fold ``partition``'s log into its store in the state directory, from its applied offset up to ``target``.

    The entry point of a restore process (engine/runtime/loop/bulk.py): the owner opens the
    store after it, and restores in its loop only what was committed meanwhile.
    """
    store = open_locked(store_path(settings.state_dir, settings.namespace, partition), holder_name("restore process"))
    try:
        restorer = Restorer(store, settings.events_topic, partition, profile=owner_profile(settings))
        with KafkaLog(settings, "restore") as log:
            restorer.feed(log.records(settings.events_topic, partition, restorer.next_offset, target))
        restorer.finish()
    finally:
        store.close()
