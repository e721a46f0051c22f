"""A part of a page that could not be read says why in one line, and the rest of the page still shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.errors import EpochqError, NotFoundError, RetryableError
from engine.questions.probe import asked

T = TypeVar("T")


@dataclass(frozen=True)
class Got(Generic[T]):
    """What one read returned, or the line that says why it could not be read."""

    value: T | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the read answered."""
        return self.problem is None


def get(read: Callable[[], T]) -> Got[T]:
    """``read()``'s answer, or one line saying what kept it from answering (the broker, a store, a value)."""
    try:
        return Got(asked(read))
    except (EpochqError, OSError) as e:  # a Kafka error comes out of ``asked`` as the EpochqError it means
        return Got(None, problem_line(e))


def problem_line(e: BaseException) -> str:
    """One line for an error a page shows instead of data."""
    if isinstance(e, RetryableError):
        return f"the log is unreachable: {e} (is the broker running? `epochq broker status`)"
    if isinstance(e, NotFoundError):
        return str(e)
    if isinstance(e, OSError):
        return f"{e.filename}: {e.strerror}" if e.filename else str(e)
    return str(e) or type(e).__name__
