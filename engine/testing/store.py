"""A partition's projection in a dict: the interface of ``projections.store.ProjectionStore``, no RocksDB, no disk.

The fold (``projections.evolve``), the batch, the ready view, the timers and the schedule desk
read and commit through it exactly as they do through RocksDB: sorted prefix scans, point
reads, and a commit of changes with the applied offset.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.domain.jobs import JobView


class MemoryStore:
    """One partition's key-value state in memory, keys kept sorted for prefix scans."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted
        self._offset = -1
        self.job_cache: dict[str, JobView] = {}  # as ProjectionStore's: decoded records, kept by the batch
        self.read_only = False

    def applied_offset(self) -> int:
        """The offset of the last event folded in, or -1 if none."""
        return self._offset

    def check(self) -> None:
        """Nothing to check: memory is never half-written."""

    def get(self, key: bytes) -> bytes | None:
        """The value under ``key``, or None."""
        return self._data.get(key)

    def scan(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Key-value pairs whose key starts with ``prefix``, in key order, from ``start``."""
        for key in self.keys(prefix, start):
            yield key, self._data[key]

    def keys(self, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]:
        """The keys that start with ``prefix``, in order, from ``start`` (a snapshot: commits may follow)."""
        keys = self._keys
        i = bisect.bisect_left(keys, max(start or prefix, prefix))
        chosen = []
        while i < len(keys) and keys[i].startswith(prefix):
            chosen.append(keys[i])
            i += 1
        return iter(chosen)

    def first(self, prefix: bytes) -> bytes | None:
        """The first key under ``prefix``, or None."""
        return next(self.keys(prefix), None)

    def commit(self, changes: dict[bytes, bytes | None], offset: int) -> None:
        """Apply ``changes`` (None deletes) and the applied ``offset`` together."""
        data, keys = self._data, self._keys
        for key, value in changes.items():
            present = key in data
            if value is None:
                if present:
                    del data[key]
                    del keys[bisect.bisect_left(keys, key)]
            else:
                if not present:
                    bisect.insort(keys, key)
                data[key] = value
        self._offset = offset

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key-value pair, in key order."""
        return ((key, self._data[key]) for key in list(self._keys))
