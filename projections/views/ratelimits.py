"""The rate-limited task types of a partition and their buckets: folded from ``RateLimitSet`` /
``RateLimitCleared`` and charged by each ``JobStarted`` of the type at the event's time; dispatch reads it.

The pure rules are ``engine.domain.ratelimits``; everything here is a function of the events
in log order, so a rebuild comes out identical.
"""

from __future__ import annotations

import marshal
from dataclasses import dataclass
from typing import Any

from engine.contract import messages as m
from engine.domain.jobs import JobView
from engine.domain.ratelimits import Bucket, bucket_of
from projections.views import keys as k


@dataclass(frozen=True, slots=True)
class LimitRecord:
    """One rate-limited task type in one partition: its bucket, and since when, why and by whom."""

    task_type: str
    bucket: Bucket
    since: int
    reason: str
    requested_by: str


def fold_limit(batch: Any, event: m.Event) -> bool:
    """Apply a set or clear of a rate limit; False if ``event`` is neither."""
    body = event.body
    if isinstance(body, m.RateLimitSet):
        _put(batch, body.task_type, bucket_of(body, event.occurred_at), event.occurred_at, body.reason,
             body.requested_by)
        return True
    if isinstance(body, m.RateLimitCleared):
        batch.delete(k.RATE + body.task_type.encode())
        return True
    return False


def charge_rate(batch: Any, job: JobView, at: int) -> None:
    """A job of the type started at ``at``: take a token from its bucket, if the type is limited."""
    record = read_limit(batch, job.task_type)
    if record is not None:
        _put(batch, job.task_type, record.bucket.started(at), record.since, record.reason, record.requested_by)


def read_limit(reader: Any, task_type: str) -> LimitRecord | None:
    """The rate limit of ``task_type`` in this partition, if any (``reader``: a batch or a store)."""
    raw = reader.get(k.RATE + task_type.encode())
    return _decode(task_type, raw) if raw is not None else None


def all_limits(reader: Any) -> list[LimitRecord]:
    """Every rate-limited task type of the partition."""
    return [_decode(k.suffix_after(k.RATE, key), raw) for key, raw in reader.scan(k.RATE)]


def _put(batch: Any, task_type: str, b: Bucket, since: int, reason: str, requested_by: str) -> None:
    value = (b.rate, b.burst, b.interval_us, b.capacity, b.tat, since, reason, requested_by)
    batch.put(k.RATE + task_type.encode(), marshal.dumps(value, 2))


def _decode(task_type: str, raw: bytes) -> LimitRecord:
    rate, burst, interval, capacity, tat, since, reason, requested_by = marshal.loads(raw)
    return LimitRecord(task_type, Bucket(rate, burst, interval, capacity, tat), since, reason, requested_by)
