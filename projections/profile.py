"""What a fold keeps: the whole projection, or only the owner's write model.

``FULL`` (the default everywhere) folds everything: jobs for ever, the history index, the
tenant index, the catalog, labels and counters. A view folds with it and answers questions.

``WRITE_MODEL`` is what a partition's owner needs to decide and nothing more: live jobs (and
dead ones, which a ReplayDeadJob brings back with their payload), ready queues, depths,
fair-share clocks, breakers, pauses, rate buckets, timers, schedules, claims, quarantine, and
a *tombstone* per ended (completed or cancelled) job for the dedup window, so that a duplicate
submission is still answered as one. The owner, its restore, its checkpoints and
``projections rebuild`` of owner stores fold with it; docs/architecture.md says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import Settings

DAY_US = 86_400 * 1_000_000
DEFAULT_DEDUP_WINDOW_S = 7 * 86_400
"""How long an ended job's id (and so its idempotency key) is remembered by default: 7 days."""


@dataclass(frozen=True, slots=True)
class Profile:
    """A fold profile: whether it keeps only the write model, and the write model's dedup window."""

    write_model: bool = False
    dedup_window_us: int = 0
    """How long (event time, µs) an ended job's tombstone stays; 0: for ever. Write model only."""


FULL = Profile()
WRITE_MODEL = Profile(True, DEFAULT_DEDUP_WINDOW_S * 1_000_000)


def write_model(dedup_window_s: int) -> Profile:
    """The write-model profile with a dedup window of ``dedup_window_s`` seconds (0: for ever)."""
    if dedup_window_s < 0:
        raise ValueError(f"dedup_window_s must be ≥ 0, got {dedup_window_s}")
    return Profile(True, dedup_window_s * 1_000_000)


def owner_profile(settings: Settings) -> Profile:
    """The write-model profile the owners of ``settings.namespace`` fold with."""
    return write_model(settings.dedup_window_s)
