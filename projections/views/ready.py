"""The ready queues' heads and the backlogs, read ahead into memory and kept in step with commits.

Dispatch asks, every tick, for the first few ready entries of each backlogged tenant. Opening
a RocksDB iterator per tenant per tick, and stepping over the tombstones that started jobs
leave behind, cost more CPU than anything else in the loop, so an owner reads them through
this view instead.

The store plus the owner's pending batch stay the truth. A window holds exactly their entries
of one (lane, tenant) queue up to its ``end`` key (all of them once ``complete``): the batch
tells the view of every ready or backlog key it folds (:meth:`ReadyView.follow`), so a job
queued in this tick can start in this tick; a window that runs dry reads its next entries
from the store, starting after ``end``. Backlog counts are loaded once per lane and then
follow the fold the same way. When pending changes are dropped, the owner clears the view.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from projections.views import keys as k
from projections.views.counters import backlogged

if TYPE_CHECKING:
    from projections.store import ProjectionStore

WINDOW = 128  # entries read from the store at a time, per (lane, tenant)
MIRRORED = (k.READY, k.BACKLOG)
"""The key prefixes whose folded changes the ready view mirrors (``Batch(..., mirror, MIRRORED)``)."""


class ReadyWindow:
    """The first entries of one tenant's ready queue in one lane: (key, job id), in key order."""

    __slots__ = ("prefix", "entries", "end", "complete")

    def __init__(self, prefix: bytes):
        self.prefix = prefix
        self.entries: list[tuple[bytes, str]] = []
        self.end = b""  # entries with keys up to here are all in ``entries``
        self.complete = False  # True: every entry of the queue is in ``entries``

    def covers(self, key: bytes) -> bool:
        """Whether ``key`` falls inside what this window mirrors."""
        return self.complete or key <= self.end

    def put(self, key: bytes, job_id: str) -> None:
        i = bisect.bisect_left(self.entries, (key,))
        if i == len(self.entries) or self.entries[i][0] != key:
            self.entries.insert(i, (key, job_id))

    def delete(self, key: bytes) -> None:
        i = bisect.bisect_left(self.entries, (key,))
        if i < len(self.entries) and self.entries[i][0] == key:
            del self.entries[i]


class ReadyView:
    """One store's ready windows and backlog counts, in memory."""

    def __init__(self, store: ProjectionStore):
        self.store = store
        self.windows: dict[bytes, ReadyWindow] = {}
        self.backlogs: dict[str, dict[str, int]] = {}

    def backlogged(self, lane: str) -> dict[str, int]:
        """Tenants with queued jobs in ``lane`` and how many each has (as committed)."""
        counts = self.backlogs.get(lane)
        if counts is None:
            counts = self.backlogs[lane] = backlogged(self.store, lane)
        return counts

    def entry(self, lane: str, tenant: str, index: int) -> tuple[bytes, str] | None:
        """The ``index``-th entry of the tenant's ready queue in ``lane`` (None past its end)."""
        window = self._window(k.ready_tenant_prefix(lane, tenant))
        while index >= len(window.entries) and not window.complete:
            self._read_more(window)
        return window.entries[index] if index < len(window.entries) else None

    def entry_after(self, lane: str, tenant: str, after: bytes) -> tuple[bytes, str] | None:
        """The tenant's first ready entry in ``lane`` with a key above ``after`` (b"": the first of all)."""
        window = self._window(k.ready_tenant_prefix(lane, tenant))
        while True:
            i = bisect.bisect_right(window.entries, (after, "\uffff"))
            if i < len(window.entries):
                return window.entries[i]
            if window.complete:
                return None
            self._read_more(window)

    @staticmethod
    def order_of(lane: str, tenant: str, key: bytes) -> bytes:
        """The queue order of one of the tenant's entries (priority, due time, arrival, id): its key after the
        tenant's prefix."""
        return key[len(k.ready_tenant_prefix(lane, tenant)):]

    def _window(self, prefix: bytes) -> ReadyWindow:
        window = self.windows.get(prefix)
        if window is None:
            window = self.windows[prefix] = ReadyWindow(prefix)
        return window

    def _read_more(self, window: ReadyWindow) -> None:
        start = window.end + b"\x00" if window.end else None
        read = 0
        for key, job_id in self.store.scan(window.prefix, start):
            window.entries.append((key, job_id.decode()))
            window.end = key
            read += 1
            if read == WINDOW:
                return
        window.complete = True

    def mirror(self, key: bytes, value: bytes | None) -> None:
        """Follow one put (``value``) or delete (None) of a ready or backlog key, as it is folded."""
        if key[:2] == k.READY:
            window = self._window(key[:key.index(b"\x1f") + 1])
            if not window.complete and not window.entries:
                self._read_more(window)  # read what the store has before the pending change lands on it
            if not window.covers(key):
                return
            if value is None:
                window.delete(key)
            else:
                window.put(key, value.decode())
        elif key[:2] == k.BACKLOG:
            lane, tenant = key[len(k.BACKLOG):].decode().split(":", 1)
            counts = self.backlogged(lane)
            if value is None:
                counts.pop(tenant, None)  # an emptied queue keeps its (complete, empty) window: no store scan
            else:
                counts[tenant] = int(value)

    def clear(self) -> None:
        """Forget everything read ahead and pending (read again from the store when next asked)."""
        self.windows.clear()
        self.backlogs.clear()
