"""Which lane a job runs in: HIGH, NORMAL, LOW by priority; BATCH when marked bulk. Pure."""

from __future__ import annotations

from enum import StrEnum

from engine.errors import ValidationError


class Lane(StrEnum):
    """A lane has its own worker slots, so work in one never waits for another's."""

    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"
    BATCH = "BATCH"
    DEAD = "DEAD"


PRIORITY_ALIASES = {"critical": 9, "high": 8, "normal": 5, "low": 2}
RUNNABLE_LANES = (Lane.HIGH, Lane.NORMAL, Lane.LOW, Lane.BATCH)


def parse_priority(value: int | str) -> int:
    """A priority 0..9 from a number or an alias (critical, high, normal, low)."""
    if isinstance(value, str):
        if value.lower() in PRIORITY_ALIASES:
            return PRIORITY_ALIASES[value.lower()]
        if not value.isdigit():
            raise ValidationError(f"priority: expected 0-9 or one of {sorted(PRIORITY_ALIASES)}, got {value!r}")
        value = int(value)
    if isinstance(value, bool) or not 0 <= value <= 9:
        raise ValidationError(f"priority: expected 0-9, got {value!r}")
    return value


def lane_for(priority: int, requested: str | None = None, pinned: str | None = None) -> Lane:
    """The lane of a job: the task type's pin, else BATCH if asked, else by priority."""
    choice = pinned or requested
    if choice:
        try:
            lane = Lane(choice.upper())
        except ValueError:
            raise ValidationError(f"lane: unknown lane {choice!r}; expected one of HIGH, NORMAL, LOW, BATCH") from None
        if lane is Lane.DEAD:
            raise ValidationError("lane: DEAD is the dead-letter queue, not a lane to submit to")
        return lane
    if priority >= 8:
        return Lane.HIGH
    return Lane.NORMAL if priority >= 4 else Lane.LOW
