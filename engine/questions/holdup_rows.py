"""What the state directory's projections say about breakers and pauses now: what a waiter reports as holding a job."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import Settings
from engine.questions.stores import kept_stores
from projections.views.breakers import BreakerRecord, all_breakers
from projections.views.pauses import PauseRecord, all_paused
from projections.views.ratelimits import LimitRecord, all_limits


@dataclass(frozen=True)
class HoldupRows:
    """Each task type's newest breaker record, each partition's paused and rate-limited task types, and the
    partitions read."""

    breakers: list[BreakerRecord]
    paused: list[tuple[int, PauseRecord]]
    partitions: frozenset[int]
    limited: list[tuple[int, LimitRecord]]


def holdup_rows(settings: Settings) -> HoldupRows:
    """One pass over every view store of the state directory, through the kept handles (none there: empty rows)."""
    newest: dict[str, BreakerRecord] = {}
    paused: list[tuple[int, PauseRecord]] = []
    limited: list[tuple[int, LimitRecord]] = []
    read: set[int] = set()
    for p, store in kept_stores(settings):  # a store being created, or not a store, is not among them
        records, pauses, limits = all_breakers(store), all_paused(store), all_limits(store)
        read.add(p)
        paused += [(p, pause) for pause in pauses]
        limited += [(p, limit) for limit in limits]
        for record in records:
            if record.task_type not in newest or record.since > newest[record.task_type].since:
                newest[record.task_type] = record
    return HoldupRows(list(newest.values()), paused, frozenset(read), limited)
