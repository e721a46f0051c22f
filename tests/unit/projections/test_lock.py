"""The store lock: one writer per partition store, across descriptors and processes, never stale."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine.config import load_settings
from engine.errors import StoreLockedError
from projections.lock import StoreLock, holder_name, holder_of, lock_path, partition_of
from projections.rebuild import holding
from projections.store import open_locked, open_store

HOLD = """
import sys, time
from projections.lock import StoreLock
lock = StoreLock.acquire(sys.argv[1], "engine child (pid %d)" % __import__("os").getpid())
print("held", flush=True)
time.sleep(600)
"""


def hold_in_child(store: Path) -> subprocess.Popen[str]:
    """A child process that takes the lock of ``store`` and keeps it until killed."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[3])
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_the_lock_file_sits_beside_the_store(tmp_path: Path) -> None:
    assert lock_path(tmp_path / "ns" / "p0003") == tmp_path / "ns" / "p0003.lock"
    assert partition_of(tmp_path / "p0003") == 3
    assert partition_of(tmp_path / "store") is None


def test_a_second_descriptor_in_one_process_is_refused_naming_partition_path_and_holder(tmp_path: Path) -> None:
    store = tmp_path / "ns" / "p0007"
    first = StoreLock.acquire(store, "engine a (pid 1)")
    with pytest.raises(StoreLockedError) as info:
        StoreLock.acquire(store, "epochq projections rebuild (pid 2)")
    error = info.value
    assert (error.partition, error.path, error.holder) == (7, str(store), "engine a (pid 1)")
    assert "partition 7" in str(error) and str(store) in str(error) and "engine a (pid 1)" in str(error)
    first.release()
    second = StoreLock.acquire(store, "epochq projections rebuild (pid 2)")
    assert holder_of(store) == "epochq projections rebuild (pid 2)"
    second.release()


def test_release_clears_the_holder_and_twice_is_harmless(tmp_path: Path) -> None:
    store = tmp_path / "p0000"
    with StoreLock.acquire(store, holder_name("engine", "a")) as lock:
        assert holder_of(store) == f"engine a (pid {os.getpid()})"
        assert lock.held
    assert not lock.held and holder_of(store) is None
    lock.release()
    StoreLock.acquire(store, "again").release()


def test_another_process_holds_it_until_it_dies_even_by_kill_9(tmp_path: Path) -> None:
    store = tmp_path / "p0002"
    child = hold_in_child(store)
    try:
        with pytest.raises(StoreLockedError, match=f"held by engine child \\(pid {child.pid}\\)"):
            StoreLock.acquire(store, "me")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    StoreLock.acquire(store, "me").release()  # the kernel dropped the dead holder's lock: never stale


def test_the_lock_survives_the_store_directory_being_replaced(tmp_path: Path) -> None:
    store = tmp_path / "p0001"
    lock = StoreLock.acquire(store, "rebuild")
    staging = tmp_path / "p0001.rebuild"
    staging.mkdir()
    staging.rename(store)
    with pytest.raises(StoreLockedError):
        StoreLock.acquire(store, "engine")
    lock.release()


def test_an_opened_store_holds_its_lock_until_closed(tmp_path: Path) -> None:
    path = tmp_path / "p0004"
    store = open_locked(path, "engine a")
    with pytest.raises(StoreLockedError, match="engine a"):
        open_locked(path, "engine b")
    store.commit({b"j:x": b"1"}, 10)
    store.close()
    again = open_locked(path, "engine b")
    assert again.applied_offset() == 10
    again.close()


def test_a_wiped_store_lets_go_only_after_its_files_are_gone(tmp_path: Path) -> None:
    path = tmp_path / "p0005"
    store = open_locked(path, "engine a")
    store.commit({b"j:x": b"1"}, 3)
    store.wipe()
    assert not path.exists()
    assert store.lock is None
    open_locked(path, "engine b").close()


def test_a_reset_store_is_empty_and_keeps_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "p0006"
    store = open_locked(path, "engine a")
    store.commit({b"j:x": b"1"}, 3)
    fresh = store.reset()
    assert fresh.applied_offset() == -1 and fresh.get(b"j:x") is None
    with pytest.raises(StoreLockedError, match="engine a"):
        StoreLock.acquire(path, "rebuild")
    fresh.close()
    StoreLock.acquire(path, "rebuild").release()


def test_a_store_that_cannot_be_opened_lets_go_of_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "p0008"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a directory")
    with pytest.raises(Exception):  # noqa: B017 - RocksDB's own error
        open_locked(path, "engine a")
    StoreLock.acquire(path, "engine b").release()


def test_unlocked_stores_stay_possible_for_scratch_copies(tmp_path: Path) -> None:
    store = open_store(tmp_path / "scratch")
    assert store.lock is None
    store.close()
    assert not lock_path(tmp_path / "scratch").exists()


def test_holding_takes_every_lock_or_none(tmp_path: Path) -> None:
    settings = load_settings(bootstrap="127.0.0.1:1", namespace="ns", state_dir=str(tmp_path))
    held = StoreLock.acquire(tmp_path / "ns" / "p0001", "engine a (pid 9)")
    with pytest.raises(StoreLockedError, match="partition 1: .* held by engine a"):
        with holding(settings, [0, 1, 2]):
            raise AssertionError("must not get here")
    StoreLock.acquire(tmp_path / "ns" / "p0000", "free again").release()  # the lock of 0 was let go
    held.release()
    with holding(settings, [0, 1, 2]):
        assert holder_of(tmp_path / "ns" / "p0002") == f"epochq projections rebuild (pid {os.getpid()})"
