"""The circuit breakers of one engine instance: per task type, shared by every partition it owns.

Each method takes the time and returns the event body to record (or None); the caller
stages it. The pure rules live in ``engine.domain.breaker``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from engine.contract import messages as m
from engine.domain.breaker import (
    CLOSED, BreakerClosed, BreakerOpened, BreakerPolicy, BreakerState, may_start, on_cooled_down, on_failure,
    on_success,
)
from projections.views.breakers import BreakerRecord

log = logging.getLogger("epochq.breakers")


class BreakerBoard:
    """Every task type's breaker state, as this instance decides it."""

    def __init__(self, policies: Mapping[str, BreakerPolicy]):
        self.policies = dict(policies)
        self.states: dict[str, BreakerState] = {}
        self._since: dict[str, int] = {}

    def startable(self, task_type: str, now: int) -> bool:
        """Whether a job of ``task_type`` may start now (without taking the half-open probe)."""
        policy = self.policies.get(task_type)
        return policy is None or may_start(self.states.get(task_type, CLOSED), policy, now).allowed

    def take_start(self, task_type: str, job_id: str, now: int) -> tuple[bool, m.EventBody | None]:
        """Take a start through the breaker: (allowed, the BreakerHalfOpened to record if this job is the probe)."""
        policy = self.policies.get(task_type)
        if policy is None:
            return True, None
        decision = may_start(self.states.get(task_type, CLOSED), policy, now)
        if not decision.allowed:
            return False, None
        self.states[task_type] = decision.state
        if decision.transition is None:
            return True, None
        return True, m.BreakerHalfOpened(task_type, job_id, decision.transition.reason)

    def outcome(self, task_type: str, kind: str, now: int) -> m.EventBody | None:
        """Feed one finished attempt; the BreakerOpened or BreakerClosed it causes, if any."""
        policy = self.policies.get(task_type)
        if policy is None or kind == "invalid":
            return None
        step = on_success if kind == "succeeded" else on_failure
        self.states[task_type], change = step(self.states.get(task_type, CLOSED), policy, now)
        if isinstance(change, BreakerOpened):
            log.warning("breaker of %s: opened (%s)", task_type, change.reason)
            return m.BreakerOpened(task_type, change.failures, change.reopen_at, change.reason)
        if isinstance(change, BreakerClosed):
            log.warning("breaker of %s: closed (%s)", task_type, change.reason)
            return m.BreakerClosed(task_type, change.reason)
        return None

    def cooled(self, task_type: str, now: int) -> m.EventBody | None:
        """A cool-down timer fired: the BreakerHalfOpened to record, if the breaker was still open."""
        policy = self.policies.get(task_type)
        if policy is None:
            return None
        self.states[task_type], half = on_cooled_down(self.states.get(task_type, CLOSED), policy, now)
        if half is None:
            return None
        log.warning("breaker of %s: half-open (%s)", task_type, half.reason)
        return m.BreakerHalfOpened(task_type, "", half.reason)

    def resume(self, record: BreakerRecord) -> None:
        """Take a breaker status found in a newly owned partition if it is newer than ours."""
        if record.since > self._since.get(record.task_type, -1):
            self._since[record.task_type] = record.since
            self.states[record.task_type] = record.state()
