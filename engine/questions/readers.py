"""Store handles a long-lived reader keeps open: RocksDB secondaries, caught up with their writer on each use.

Opening a store read-only replays its write-ahead log, a tenth of a second or more per store
while an engine writes it; a console that opened every store for every page would spend its
time there. A secondary instance is opened once and then catches up with what the writer
committed since (``try_catch_up_with_primary``, a few ms). A store replaced meanwhile (a
``projections rebuild``) is noticed by its RocksDB identity and opened again. Handles are never closed
under a reader: one replaced is dropped, and closed when the last reader lets go of it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from engine.config import Settings
from engine.questions.stores import partition_dirs
from projections.store import ProjectionStore


@dataclass
class _Handle:
    store: ProjectionStore
    identity: bytes  # the store's IDENTITY when opened


class Readers:
    """The open store handles of one process, by store path."""

    def __init__(self) -> None:
        self._handles: dict[Path, _Handle] = {}
        self._lock = threading.Lock()
        self._scratch: Path | None = None

    def stores(self, settings: Settings) -> list[tuple[int, ProjectionStore]]:
        """Every readable store of the state directory, caught up with its writer."""
        out = []
        for p, path in partition_dirs(settings):
            store = self.store(path)
            if store is not None:
                out.append((p, store))
        return out

    def store(self, path: Path) -> ProjectionStore | None:
        """The store at ``path``, caught up; None if there is no readable one."""
        identity = _identity(path)
        if identity is None:
            return None
        with self._lock:
            handle = self._handles.get(path)
            if handle is None or handle.identity != identity:
                handle = self._open(path, identity)
                if handle is None:
                    return None
        try:
            handle.store.catch_up()
        except Exception:  # noqa: BLE001 - replaced or removed under us: open it again next time
            with self._lock:
                self._handles.pop(path, None)
            return None
        return handle.store

    def _open(self, path: Path, identity: bytes) -> _Handle | None:
        scratch = self._scratch_dir() / f"{abs(hash(path)):x}-{abs(hash(identity)):x}"
        try:
            store = ProjectionStore(path, secondary=scratch)
        except Exception:  # noqa: BLE001 - a store being created, or not a store: not a source of answers
            self._handles.pop(path, None)
            return None
        handle = self._handles[path] = _Handle(store, identity)
        return handle

    def _scratch_dir(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="epochq-readers-"))
            atexit.register(shutil.rmtree, self._scratch, True)
        return self._scratch


def _identity(path: Path) -> bytes | None:
    """The store's RocksDB identity (a UUID written when it was created): a rebuilt store has another."""
    try:
        return (path / "IDENTITY").read_bytes()
    except OSError:
        return None


READERS = Readers()
"""The process's readers (the catalog and the job page use them)."""
