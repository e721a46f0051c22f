"""A part of a page that could not be read says why in one line, and the rest of the page still shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from engine.errors import EpochqError, NotFoundError, RetryableError
from engine.runtime.kafka.errors import typed

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
        return Got(read())
    except (EpochqError, OSError) as e:
        return Got(None, problem_line(e))
    except Exception as e:  # a librdkafka error not typed where it entered is typed here; anything else is a bug
        escaped = typed(e)
        if escaped is e:
            raise
        return Got(None, problem_line(escaped))


def problem_line(e: BaseException) -> str:
    """One line for an error a page shows instead of data."""
    if isinstance(e, RetryableError):
        return f"the log is unreachable: {e} (is the broker running? `epochq broker status`)"
    if isinstance(e, NotFoundError):
        return str(e)
    if isinstance(e, OSError):
        return f"{e.filename}: {e.strerror}" if e.filename else str(e)
    return str(e) or type(e).__name__
