"""Who may write a partition's store: an exclusive advisory lock on a file beside it.

Every opener that writes a store (an engine's partition, a standby copy, ``projections
rebuild``) takes ``<state_dir>/<ns>/pNNNN.lock`` first and lets go when it closes the store;
readers (queries, ``--verify``) open the store read-only and take no lock.

The lock is ``flock(LOCK_EX | LOCK_NB)``: it belongs to one open file description, so two
openers in one process exclude each other as two processes do, and the kernel drops it when
its holder exits, ``kill -9`` included: a lock is never stale. The holder writes who it is
into the file, for the message of whoever is refused. The file sits beside the store, not in
it, because a rebuild or a wipe deletes the store's directory; it is never deleted itself
(deleting it would let two openers each lock a different file of the same name).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from engine.errors import StoreLockedError

UNKNOWN_HOLDER = "another process (it did not say who)"


def lock_path(store: Path) -> Path:
    """The lock file of the store at ``store``: ``pNNNN.lock`` beside ``pNNNN``."""
    store = Path(store)
    return store.with_name(store.name + ".lock")


def partition_of(store: Path) -> int | None:
    """The partition number in a store's name (``p0003`` -> 3), or None for another name."""
    name = Path(store).name
    return int(name[1:]) if name[:1] == "p" and name[1:].isdigit() else None


def holder_of(store: Path) -> str | None:
    """Who holds the lock of ``store`` as its lock file says, or None if nobody wrote one."""
    try:
        text = lock_path(store).read_text(errors="replace").strip()
    except OSError:
        return None
    return text or None


class StoreLock:
    """The exclusive right to write one store, held until :meth:`release`."""

    def __init__(self, store: Path, fd: int, holder: str):
        self.store, self.path, self.holder = Path(store), lock_path(store), holder
        self._fd = fd

    @classmethod
    def acquire(cls, store: Path, holder: str) -> StoreLock:
        """Take the lock of ``store`` now, or raise StoreLockedError naming who has it."""
        path = lock_path(store)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(partition_of(store), str(store), holder_of(store) or UNKNOWN_HOLDER) from None
        except BaseException:
            os.close(fd)
            raise
        _write(fd, holder)
        return cls(store, fd, holder)

    @property
    def held(self) -> bool:
        """Whether this lock is still held (not released)."""
        return self._fd >= 0

    def release(self) -> None:
        """Let go of the lock (clearing the holder's name first); releasing twice does nothing."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the only descriptor of the open file drops the flock

    def __enter__(self) -> StoreLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _write(fd: int, holder: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{holder}\n".encode(), 0)


def holder_name(role: str, owner_id: str | None = None) -> str:
    """How this process names itself in a lock file: its role, owner id and pid."""
    who = f"{role} {owner_id}" if owner_id else role
    return f"{who} (pid {os.getpid()})"
