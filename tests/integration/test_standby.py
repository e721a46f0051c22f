"""Warm standbys (``engine run --standby``) with real engine processes on a real broker."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.questions.stores import read_store
from projections.store import store_path
from tests.integration.conftest import eventually, start_engine, verify_partition


def applied_offsets(settings: Settings) -> dict[int, int]:
    """The applied offset of every owner (or standby) store in the state directory of ``settings``."""
    out = {}
    for p in range(3):
        path = store_path(settings.state_dir, settings.namespace, p)
        if not path.is_dir():
            continue
        try:
            with read_store(path) as store:
                out[p] = store.applied_offset()
        except Exception:  # noqa: BLE001 - a store being created right now
            continue
    return out


def caught_up(owner: Settings, standby: Settings, partitions: set[int]) -> bool:
    """Whether the standby copies of ``partitions`` reached the owner's applied offsets."""
    theirs, ours = applied_offsets(owner), applied_offsets(standby)
    return all(p in ours and ours[p] == theirs.get(p) for p in partitions)


def test_a_standby_follows_the_owner_and_takes_over_from_its_copy(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path, extra=("--standby",))
    b.wait_active(1)
    handles = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": f"t{i % 3}"} for i in range(90)])
    for handle in handles:
        assert handle.wait(timeout=60).status == "completed"

    standby, owner = b.settings(settings), a.settings(settings)
    followed = a.owned()
    assert followed and not followed & b.owned()
    eventually(lambda: caught_up(owner, standby, followed), 30, "the copies to catch up")
    copies = applied_offsets(standby)
    assert all(copies[p] > 0 for p in followed)

    seen = len(b.logs())
    a.signal(signal.SIGKILL)
    eventually(lambda: b.owned() == {0, 1, 2}, 60, "b to take every partition over")
    starts = {int(p): int(n) for p, n in re.findall(r"partition (\d+): restoring from offset (\d+)", b.logs()[seen:])}
    assert starts.keys() == followed, b.logs()[-3000:]
    assert all(starts[p] >= copies[p] > 0 for p in followed)  # caught up from the copy, not from offset 0

    after = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": f"t{i % 3}"} for i in range(30)])
    for handle in after:
        assert handle.wait(timeout=60).status == "completed"
    assert b.stop() == 0
    for p in range(3):
        assert verify_partition(standby, p).matches


def test_standby_copies_match_a_rebuild_of_the_log(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    never = str(tmp_path / "never-fixed")  # every attempt fails: retries, then dead letters
    handles = client.submit_many([{"task_type": "flaky", "payload": {"fixed_when": never}, "tenant": "acme"}
                                  for _ in range(20)])
    b = start_engine(engines, settings, "b", tmp_path, extra=("--standby",))
    for handle in handles:
        assert handle.wait(timeout=60).status == "dead"
    owner, standby = a.settings(settings), b.settings(settings)
    followed = a.owned()
    eventually(lambda: followed and caught_up(owner, standby, followed), 60, "the copies to catch up")
    assert b.stop() == 0  # the copies are closed cleanly; then compared while a still owns the partitions
    for p in followed:
        assert verify_partition(standby, p).matches
