"""When a failed attempt runs again: exponential backoff with jitter, capped. Pure."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from engine.contract.validation import MAX_AHEAD_US
from engine.errors import TaskDefinitionError

US = 1_000_000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how soon a task type's failed attempts are retried.

    ``max_attempts`` counts every attempt, the first included (1 means never retry).
    ``max_lost`` is how many times a job may be re-queued because its engine died while running it
    (``JobRequeued reason=owner_lost``: out of memory, a segfault, ``os._exit``); the next loss dead-letters it
    (``owner_lost_repeatedly``), so a handler that kills its engine does not kill engine after engine. A planned
    hand-over (``owner_stopped``, ``handover``) never counts. Delays are in seconds; ``jitter`` is the fraction of
    the delay drawn at random (0.2 means the delay lies in [0.8 d, d]).
    """

    max_attempts: int = 3
    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: float = 0.2
    multiplier: float = 2.0
    max_lost: int = 3

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise TaskDefinitionError(f"retry: max_attempts must be >= 1, got {self.max_attempts}")
        if not isinstance(self.max_lost, int) or isinstance(self.max_lost, bool) or self.max_lost < 0:
            raise TaskDefinitionError(f"retry: max_lost must be an integer >= 0, got {self.max_lost!r}")
        if not 0 <= self.base_delay <= self.max_delay <= MAX_AHEAD_US / US:  # False for NaN too
            raise TaskDefinitionError(f"retry: need 0 <= base_delay <= max_delay <= 100 years, "
                                      f"got {self.base_delay}, {self.max_delay}")
        if not 0.0 <= self.jitter <= 1.0:
            raise TaskDefinitionError(f"retry: jitter must be within [0, 1], got {self.jitter}")
        if not 1.0 <= self.multiplier < math.inf:
            raise TaskDefinitionError(f"retry: multiplier must be a finite number >= 1, got {self.multiplier}")


def should_retry(policy_max_attempts: int, attempt: int, retryable: bool) -> bool:
    """Whether the attempt that just failed is followed by another one."""
    return retryable and attempt < policy_max_attempts


def lost_too_often(policy_max_lost: int, lost: int) -> bool:
    """Whether a job whose owner was just lost while running it, after ``lost`` such losses already re-queued, is
    dead-lettered rather than re-queued once more (``max_lost`` re-queues at most: the next loss is its end)."""
    return lost >= policy_max_lost


def backoff_us(policy: RetryPolicy, attempt: int, job_id: str) -> int:
    """The delay before the attempt after ``attempt`` (1-based), in microseconds.

    The jitter is drawn from a hash of (job id, attempt), so the same decision replayed
    anywhere gives the same delay, and jobs that failed together spread out.
    """
    return int(_capped_delay(policy, attempt) * (1.0 - policy.jitter * _unit(job_id, attempt)) * US)


def _capped_delay(policy: RetryPolicy, attempt: int) -> float:
    """``base_delay * multiplier ** (attempt - 1)`` seconds, at most ``max_delay`` (however many attempts)."""
    try:
        raw = policy.base_delay * policy.multiplier ** max(0, attempt - 1)
    except OverflowError:  # float power past 1e308: far beyond any cap
        return policy.max_delay
    return min(raw, policy.max_delay)


def _unit(job_id: str, attempt: int) -> float:
    digest = hashlib.blake2b(f"{job_id}:{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
