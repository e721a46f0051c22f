"""Whether jobs of a task type may start: a circuit breaker (closed / open / half-open). Pure.

- closed: jobs start. ``failure_threshold`` failures within ``window_s`` open it.
- open: jobs stay queued (not failed, not retried) until ``cooldown_s`` has passed. The
  cool-down's end is a timer in the due-time index (:func:`on_cooled_down` turns the
  breaker half-open); should a start come first, it turns it half-open and is the probe.
- half_open: exactly one probe runs; its success closes the breaker, its failure
  re-opens it with a new cool-down.

Time is an argument (``now_us``, microseconds). Every change of status comes back as a
transition value (``BreakerOpened``, ``BreakerHalfOpened``, ``BreakerClosed``) for the
engine to write as an event; :func:`apply` is the fold of such an event.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from engine.errors import TaskDefinitionError

US = 1_000_000


class BreakerStatus(StrEnum):
    """Where a task type's breaker is."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a task type's breaker opens and how long it stays open."""

    failure_threshold: int = 5
    window_s: float = 60.0
    cooldown_s: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.failure_threshold, bool) or not isinstance(self.failure_threshold, int) \
                or self.failure_threshold < 1:
            raise TaskDefinitionError(f"breaker: failure_threshold must be an integer >= 1, "
                                      f"got {self.failure_threshold!r}")
        if not _finite(self.window_s) or self.window_s <= 0:
            raise TaskDefinitionError(f"breaker: window_s must be a finite number > 0, got {self.window_s!r}")
        if not _finite(self.cooldown_s) or self.cooldown_s < 0:
            raise TaskDefinitionError(f"breaker: cooldown_s must be a finite number >= 0, got {self.cooldown_s!r}")

    @property
    def window_us(self) -> int:
        """The failure window in microseconds."""
        return round(self.window_s * US)

    @property
    def cooldown_us(self) -> int:
        """The cool-down in microseconds."""
        return round(self.cooldown_s * US)


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One task type's breaker: the source of truth for whether its jobs may start.

    ``failures`` holds the times (µs) of the recent failures while closed, at most
    ``failure_threshold`` of them, oldest first.
    """

    status: BreakerStatus = BreakerStatus.CLOSED
    failures: tuple[int, ...] = ()
    opened_at: int | None = None
    probe_in_flight: bool = False

    def to_dict(self) -> dict[str, object]:
        """Plain values, for storing in the projection."""
        return {"status": self.status.value, "failures": list(self.failures),
                "opened_at": self.opened_at, "probe_in_flight": self.probe_in_flight}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> BreakerState:
        """The state ``to_dict`` produced."""
        opened = data.get("opened_at")
        return cls(BreakerStatus(str(data.get("status", "closed"))),
                   tuple(int(t) for t in data.get("failures") or ()),  # type: ignore[attr-defined]
                   None if opened is None else int(opened),  # type: ignore[call-overload]
                   bool(data.get("probe_in_flight", False)))


CLOSED = BreakerState()


@dataclass(frozen=True, slots=True)
class BreakerOpened:
    """The breaker opened (or re-opened after a failed probe); jobs wait until ``reopen_at``."""

    at: int
    reopen_at: int
    failures: int
    reason: str


@dataclass(frozen=True, slots=True)
class BreakerHalfOpened:
    """The cool-down passed: one probe job may run."""

    at: int
    reason: str


@dataclass(frozen=True, slots=True)
class BreakerClosed:
    """The probe succeeded: jobs of the type run again."""

    at: int
    reason: str


Transition = BreakerOpened | BreakerHalfOpened | BreakerClosed


@dataclass(frozen=True, slots=True)
class Permit:
    """Whether a job may start now, the breaker's state if it does, and any transition.

    ``state`` already counts the start (a half-open breaker has its probe in flight);
    when ``allowed`` is false, ``retry_at`` says when asking again can change the answer
    (``None``: when the probe in flight finishes).
    """

    allowed: bool
    state: BreakerState
    transition: BreakerHalfOpened | None = None
    reason: str = ""
    retry_at: int | None = None


def may_start(state: BreakerState, policy: BreakerPolicy, now_us: int) -> Permit:
    """Whether a job of the type may start at ``now_us``; past the cool-down this is the probe."""
    if state.status is BreakerStatus.CLOSED:
        return Permit(True, state)
    if state.status is BreakerStatus.HALF_OPEN:
        if state.probe_in_flight:
            return Permit(False, state, reason="half-open: the probe is still running")
        return Permit(True, on_started(state), reason="half-open: this job is the probe")
    reopen_at = _reopen_at(state, policy)
    if now_us < reopen_at:
        return Permit(False, state, reason="open: cooling down", retry_at=reopen_at)
    half = BreakerHalfOpened(now_us, f"cool-down of {policy.cooldown_s:g}s passed")
    return Permit(True, on_started(apply(state, half)), half, "half-open: this job is the probe")


def on_cooled_down(state: BreakerState, policy: BreakerPolicy,
                   now_us: int) -> tuple[BreakerState, BreakerHalfOpened | None]:
    """The breaker when its cool-down timer fires at ``now_us``: half-open, waiting for its probe.

    A stale timer (the breaker already half-open or closed, or re-opened later) changes nothing.
    """
    if state.status is not BreakerStatus.OPEN or now_us < _reopen_at(state, policy):
        return state, None
    half = BreakerHalfOpened(now_us, f"cool-down of {policy.cooldown_s:g}s ended")
    return apply(state, half), half


def on_failure(state: BreakerState, policy: BreakerPolicy, now_us: int) -> tuple[BreakerState, Transition | None]:
    """The breaker after a job of the type failed at ``now_us``, and the transition if any."""
    if state.status is BreakerStatus.HALF_OPEN:
        opened = BreakerOpened(now_us, now_us + policy.cooldown_us, 1, "probe failed")
        return apply(state, opened), opened
    if state.status is BreakerStatus.OPEN:
        return state, None
    failures = _recent((*state.failures, now_us), policy, now_us)
    if len(failures) < policy.failure_threshold:
        return replace(state, failures=failures), None
    reason = f"{len(failures)} failures within {policy.window_s:g}s"
    opened = BreakerOpened(now_us, now_us + policy.cooldown_us, len(failures), reason)
    return apply(state, opened), opened


def on_success(state: BreakerState, policy: BreakerPolicy, now_us: int) -> tuple[BreakerState, Transition | None]:
    """The breaker after a job of the type succeeded at ``now_us``, and the transition if any.

    A success while half-open closes the breaker. A success while open (a job that
    started before it opened) changes nothing; the probe decides.
    """
    if state.status is BreakerStatus.HALF_OPEN:
        closed = BreakerClosed(now_us, "probe succeeded")
        return apply(state, closed), closed
    if state.status is BreakerStatus.OPEN:
        return state, None
    return replace(state, failures=_recent(state.failures, policy, now_us)), None


def on_started(state: BreakerState) -> BreakerState:
    """The breaker after a job of the type started: in half-open, that job is the probe."""
    if state.status is BreakerStatus.HALF_OPEN:
        return replace(state, probe_in_flight=True)
    return state


def on_requeued(state: BreakerState) -> BreakerState:
    """The breaker after a running job went back to the queue (failover): the probe slot frees."""
    if state.status is BreakerStatus.HALF_OPEN:
        return replace(state, probe_in_flight=False)
    return state


def apply(state: BreakerState, transition: Transition) -> BreakerState:
    """The breaker after ``transition``: the fold of a breaker event (idempotent)."""
    if isinstance(transition, BreakerOpened):
        return BreakerState(BreakerStatus.OPEN, (), transition.at, False)
    if isinstance(transition, BreakerHalfOpened):
        return BreakerState(BreakerStatus.HALF_OPEN, (), state.opened_at, False)
    return CLOSED


def _recent(failures: tuple[int, ...], policy: BreakerPolicy, now_us: int) -> tuple[int, ...]:
    """The failures inside the window ending at ``now_us``, the newest ``threshold`` of them."""
    inside = tuple(t for t in failures if t > now_us - policy.window_us)
    return inside[-policy.failure_threshold:]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _reopen_at(state: BreakerState, policy: BreakerPolicy) -> int:
    return (state.opened_at or 0) + policy.cooldown_us
