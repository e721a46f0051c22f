"""Which lane a job runs in: HIGH, NORMAL, LOW by priority; BATCH when marked bulk. Pure."""

from __future__ import annotations

from enum import StrEnum

from engine.contract.validation import check_lane, check_priority
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
        if not (value.isascii() and value.isdigit()):
            raise ValidationError(f"priority: expected 0-9 or one of {sorted(PRIORITY_ALIASES)}, got {value!r}",
                                  "priority")
        value = int(value)
    return check_priority(value)


def lane_for(priority: int, requested: str | None = None, pinned: str | None = None) -> Lane:
    """The lane of a job: the task type's pin, else BATCH if asked, else by priority."""
    choice = check_lane(pinned or requested)
    if choice:
        return Lane(choice)
    if priority >= 8:
        return Lane.HIGH
    return Lane.NORMAL if priority >= 4 else Lane.LOW
