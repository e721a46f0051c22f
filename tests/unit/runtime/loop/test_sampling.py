"""The sampled gauges of remote pools: queued jobs per pool from the catalog's per-task-type counters."""

from __future__ import annotations

from pathlib import Path

from projections.batch import Batch
from projections.evolve import fold
from projections.store import open_store
from projections.views import keys as k
from engine.runtime.loop.sampling import by_pool, queued_by_type
from tests.unit.factories import claim
from tests.unit.histories import lifecycle

POOLS = {"render": "gpu", "train": "gpu", "resize": "cpu"}


def test_queued_jobs_are_summed_per_pool_and_local_types_left_out() -> None:
    queued = {"render": 2, "train": 3, "resize": 1, "email": 7}
    assert by_pool(queued, POOLS.get, ["cpu", "gpu", "idle"]) == {"cpu": 1, "gpu": 5, "idle": 0}


def test_a_pool_this_instance_does_not_dispatch_to_is_not_reported() -> None:
    assert by_pool({"render": 2}, POOLS.get, ["cpu"]) == {"cpu": 0}


def test_queued_counts_come_from_the_folded_counters_of_every_store(tmp_path: Path) -> None:
    stores = [open_store(tmp_path / "p0"), open_store(tmp_path / "p1")]
    histories = [
        [*lifecycle("j1", "acme", "render", 10, end="queued"), *lifecycle("j2", "acme", "render", 20, end="running"),
         *lifecycle("j3", "acme", "email", 30, end="queued"), *lifecycle("j4", "acme", "render", 40)],
        [*lifecycle("j5", "beta", "render", 50, end="queued"), *lifecycle("j6", "beta", "resize", 60, end="queued")],
    ]
    for store, events in zip(stores, histories, strict=True):
        batch = Batch(store)
        for offset, ev in enumerate([claim(1), *events]):
            fold(batch, ev, offset)
        batch.commit()
    try:
        queued = queued_by_type(stores)
        assert queued == {"render": 2, "email": 1, "resize": 1}
        assert by_pool(queued, POOLS.get, ["cpu", "gpu"]) == {"cpu": 1, "gpu": 2}
    finally:
        for store in stores:
            store.close()


def test_a_count_below_zero_of_a_store_folded_before_the_counter_reads_as_nothing_queued(tmp_path: Path) -> None:
    store = open_store(tmp_path / "p0")
    store.commit({k.type_depth_key("render"): b"-1", k.type_depth_key("train"): b"2"}, 7)
    try:
        assert queued_by_type([store]) == {"train": 2}
    finally:
        store.close()
