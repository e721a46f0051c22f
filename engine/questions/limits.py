"""Read-only questions about task types' rate limits to the projections of a state directory."""

from __future__ import annotations

from engine.config import Settings
from engine.questions.stores import partition_dirs, read_store
from projections.views.ratelimits import LimitRecord, all_limits


def rate_limits(settings: Settings) -> list[tuple[int, LimitRecord]]:
    """(partition, limit) of every rate-limited task type in every partition of the state directory."""
    out: list[tuple[int, LimitRecord]] = []
    for p, path in partition_dirs(settings):
        with read_store(path) as store:
            out.extend((p, record) for record in all_limits(store))
    return out
