"""The breakers view: each task type's circuit-breaker status, folded from breaker events."""

from __future__ import annotations

import marshal
from dataclasses import dataclass
from typing import Any

from engine.contract import messages as m
from engine.domain.breaker import BreakerState, BreakerStatus
from projections.views import keys as k

STATUS = {m.BreakerOpened: BreakerStatus.OPEN, m.BreakerHalfOpened: BreakerStatus.HALF_OPEN,
          m.BreakerClosed: BreakerStatus.CLOSED}


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    """What the log says about one task type's breaker."""

    task_type: str
    status: BreakerStatus
    since: int
    opened_at: int | None
    reopen_at: int | None
    reason: str

    def state(self) -> BreakerState:
        """The pure breaker state an owner resumes from (no failures counted, no probe running)."""
        return BreakerState(self.status, (), self.opened_at, False)


def fold_breaker(batch: Any, event: m.Event) -> bool:
    """Apply a breaker event; False if ``event`` is not one."""
    status = STATUS.get(type(event.body))
    if status is None:
        return False
    body: Any = event.body
    key = k.BREAKER + body.task_type.encode()
    old = read_breaker(batch, body.task_type)
    opened = event.occurred_at if status is BreakerStatus.OPEN else (old.opened_at if old else None)
    reopen = body.reopen_at if status is BreakerStatus.OPEN else (
        old.reopen_at if old and status is not BreakerStatus.CLOSED else None)
    if status is BreakerStatus.CLOSED:
        opened = None
    batch.put(key, marshal.dumps((status.value, event.occurred_at, opened, reopen, body.reason), 2))
    _index_cool_down(batch, body.task_type, old, body.reopen_at if status is BreakerStatus.OPEN else None)
    return True


def _index_cool_down(batch: Any, task_type: str, old: BreakerRecord | None, reopen_at: int | None) -> None:
    """Keep the breaker's cool-down in the due-time index: the time router fires its end."""
    if old is not None and old.status is BreakerStatus.OPEN and old.reopen_at is not None:
        batch.delete(k.breaker_due_key(old.reopen_at, task_type))
    if reopen_at is not None:
        batch.put(k.breaker_due_key(reopen_at, task_type), task_type.encode())


def read_breaker(reader: Any, task_type: str) -> BreakerRecord | None:
    """The breaker of ``task_type`` (None: never changed, i.e. closed)."""
    raw = reader.get(k.BREAKER + task_type.encode())
    return _decode(task_type, raw) if raw is not None else None


def all_breakers(reader: Any) -> list[BreakerRecord]:
    """Every task type whose breaker ever changed."""
    return [_decode(k.suffix_after(k.BREAKER, key), raw) for key, raw in reader.scan(k.BREAKER)]


def _decode(task_type: str, raw: bytes) -> BreakerRecord:
    status, since, opened, reopen, reason = marshal.loads(raw)
    return BreakerRecord(task_type, BreakerStatus(status), since, opened, reopen, reason)
