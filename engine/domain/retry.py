"""When a failed attempt runs again: exponential backoff with jitter, capped. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

US = 1_000_000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how soon a task type's failed attempts are retried.

    ``max_attempts`` counts every attempt, the first included (1 means never retry).
    Delays are in seconds; ``jitter`` is the fraction of the delay drawn at random
    (0.2 means the delay lies in [0.8 d, d]).
    """

    max_attempts: int = 3
    base_delay: float = 1.0
    max_delay: float = 300.0
    jitter: float = 0.2
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError(f"need 0 <= base_delay <= max_delay, got {self.base_delay}, {self.max_delay}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")
        if self.multiplier < 1.0:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")


def should_retry(policy_max_attempts: int, attempt: int, retryable: bool) -> bool:
    """Whether the attempt that just failed is followed by another one."""
    return retryable and attempt < policy_max_attempts


def backoff_us(policy: RetryPolicy, attempt: int, job_id: str) -> int:
    """The delay before the attempt after ``attempt`` (1-based), in microseconds.

    The jitter is drawn from a hash of (job id, attempt), so the same decision replayed
    anywhere gives the same delay, and jobs that failed together spread out.
    """
    raw = policy.base_delay * policy.multiplier ** max(0, attempt - 1)
    capped = min(raw, policy.max_delay)
    return int(capped * (1.0 - policy.jitter * _unit(job_id, attempt)) * US)


def _unit(job_id: str, attempt: int) -> float:
    digest = hashlib.blake2b(f"{job_id}:{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
