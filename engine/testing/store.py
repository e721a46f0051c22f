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
    """One partition's key-value state in memory.

    Keys are grouped by their two-byte view prefix (``j:``, ``r:``, ``h:``…); a group is sorted only
    when it is scanned after a change, so writing the history and catalog entries of many jobs costs
    no sorting, and a scan of the ready queue or a due index sorts only its own view.
    """

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._groups: dict[bytes, set[bytes]] = {}
        self._sorted: dict[bytes, list[bytes]] = {}  # a group's keys in order, while unchanged
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
        data = self._data
        return ((key, data[key]) for key in self.keys(prefix, start))

    def keys(self, prefix: bytes, start: bytes | None = None) -> Iterator[bytes]:
        """The keys that start with ``prefix``, in order, from ``start`` (a snapshot: commits may follow)."""
        ordered = self._ordered(prefix[:2]) if len(prefix) >= 2 else sorted(self._data)
        i = bisect.bisect_left(ordered, max(start or prefix, prefix))
        chosen = []
        while i < len(ordered) and ordered[i].startswith(prefix):
            chosen.append(ordered[i])
            i += 1
        return iter(chosen)

    def key_range(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        """The keys in ``[start, stop)``, in order (a snapshot: commits may follow)."""
        same = len(start) >= 2 and start[:2] == stop[:2]
        ordered = self._ordered(start[:2]) if same else sorted(self._data)
        i, j = bisect.bisect_left(ordered, start), bisect.bisect_left(ordered, stop)
        return iter(ordered[i:j])

    def _ordered(self, group: bytes) -> list[bytes]:
        ordered = self._sorted.get(group)
        if ordered is None:
            ordered = self._sorted[group] = sorted(self._groups.get(group, ()))
        return ordered

    def commit(self, changes: dict[bytes, bytes | None], offset: int, indexed: bool = True) -> None:
        """Apply ``changes`` (None deletes) and the applied ``offset`` together (``indexed``: as
        ``ProjectionStore.commit`` takes it; nothing here reads the markers it writes)."""
        data, groups, stale = self._data, self._groups, self._sorted
        for key, value in changes.items():
            group = key[:2]
            if value is None:
                if data.pop(key, None) is not None:
                    groups[group].discard(key)
                    stale.pop(group, None)
            else:
                if key not in data:
                    groups.setdefault(group, set()).add(key)
                    stale.pop(group, None)
                data[key] = value
        self._offset = offset

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key-value pair, in key order."""
        return ((key, self._data[key]) for key in sorted(self._data))
