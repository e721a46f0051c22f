"""The paused task types of a partition: folded from ``TaskTypePaused`` / ``TaskTypeResumed``; dispatch reads it."""

from __future__ import annotations

import marshal
from dataclasses import dataclass
from typing import Any

from engine.contract import messages as m
from projections.views import keys as k


@dataclass(frozen=True, slots=True)
class PauseRecord:
    """One paused task type: since when, why and by whom."""

    task_type: str
    since: int
    reason: str
    requested_by: str


def fold_pause(batch: Any, event: m.Event) -> bool:
    """Apply a pause or resume; False if ``event`` is neither."""
    body = event.body
    if isinstance(body, m.TaskTypePaused):
        batch.put(k.PAUSED + body.task_type.encode(),
                  marshal.dumps((event.occurred_at, body.reason, body.requested_by), 2))
        return True
    if isinstance(body, m.TaskTypeResumed):
        batch.delete(k.PAUSED + body.task_type.encode())
        return True
    return False


def is_paused(reader: Any, task_type: str) -> bool:
    """Whether jobs of ``task_type`` are paused in this partition (``reader``: a batch or a store)."""
    return reader.get(k.PAUSED + task_type.encode()) is not None


def all_paused(reader: Any) -> list[PauseRecord]:
    """Every paused task type of the partition."""
    return [PauseRecord(k.suffix_after(k.PAUSED, key), *marshal.loads(raw)) for key, raw in reader.scan(k.PAUSED)]
