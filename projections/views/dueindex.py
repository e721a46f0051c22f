"""The due-time indexes of a partition store: which jobs, schedules and breaker cool-downs fall due when.

Three indexes, one key layout (``<prefix><due_at, 20 digits>:<id> -> id``): delayed jobs,
retry backoffs and reschedules (``JOBS``), armed schedule occurrences (``SCHEDULES``) and
open breakers' cool-downs (``BREAKERS``). The owner's time router (``engine.runtime.loop.timers``)
reads them a slice at a time through this module and never builds a key itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.domain.timerouter import DueRange
from projections.views import keys as k
from projections.views.schedules import SCHEDULE_DUE

if TYPE_CHECKING:
    from projections.store import ProjectionStore

JOBS = k.DUE
SCHEDULES = SCHEDULE_DUE
BREAKERS = k.BREAKER_DUE
INDEXES = (JOBS, SCHEDULES, BREAKERS)


def bound(index: bytes, due_at: int) -> bytes:
    """The first key of ``index``'s entries due after ``due_at``."""
    return index + k.num(max(0, due_at + 1))


def scan_due(store: ProjectionStore, index: bytes, slice_: DueRange) -> list[tuple[int, str]]:
    """The ``(due_at, id)`` entries of ``index`` in ``(after, until]``, earliest first."""
    start, stop = bound(index, slice_.after_us), bound(index, slice_.until_us)
    out = []
    for key, value in store.scan(index, start):
        if key >= stop:
            break
        out.append((int(key[len(index):len(index) + 20]), value.decode()))
    return out
