"""The one fencing rule: which writes count, given the newest ownership claim before them. Pure.

Every owner stamps its epoch on what it writes. An event counts only if its epoch equals
the epoch of the newest valid ``OwnershipClaimed`` before it in the log; a claim is valid
only if its epoch is exactly one above the newest valid claim before it: the successor a
new owner writes (``last epoch + 1``). A claim that jumps ahead (a forged ``epoch + 100``)
counts for nothing, so it cannot fence the real owner for good; readers mark it and the
engine alerts on it (docs/security.md). The fold, history, audits and the
engine all ask these functions, so every reader reaches the same verdict on every write.
"""

from __future__ import annotations


def counts(event_epoch: int, claim_epoch: int) -> bool:
    """Whether an event written at ``event_epoch`` counts under the newest claim ``claim_epoch``."""
    return event_epoch == claim_epoch


def claim_counts(claim_epoch: int, newest_epoch: int) -> bool:
    """Whether a new claim at ``claim_epoch`` takes over from the newest valid claim so far: its successor only."""
    return claim_epoch == newest_epoch + 1


def older(epoch: int, current_epoch: int) -> bool:
    """Whether work recorded at ``epoch`` was left by an owner before ``current_epoch`` (re-queue it)."""
    return epoch < current_epoch


def fencing_token(epoch: int, attempt: int, replays: int = 0) -> int:
    """The token of ``attempt`` under ``epoch`` after ``replays`` replays from the dead-letter queue: the epoch in
    the high bits, then the replays (16 bits), then the attempt (16 bits: at most 1,000 attempts are allowed).

    A replay counts attempts from 1 again, so the replays come before the attempt: a replayed job's tokens
    stay above those of its attempts before the replay, in the same epoch. A remote worker's result counts only
    with the token of the job's running attempt (``engine.domain.remote``)."""
    return (epoch << 32) | ((replays & 0xFFFF) << 16) | (attempt & 0xFFFF)
