"""How fast jobs of a task type may start: a per-task-type rate limit, split across partitions. Pure.

A limit is namespace-wide by being sent to every partition, as a pause is
(``engine.domain.pauses``): the client sends one ``SetRateLimit`` per partition under an
envelope id that hashes there (``ratelimit:<type>#<n>``), and each owner records
``RateLimitSet`` in its own log. **The rate is split evenly**: with N partitions, each
partition starts at most ``rate / N`` jobs of the type a second, with a bucket of
``max(1, burst // N)`` — so the namespace starts at most ``rate`` a second in the long run
(bursts up to ``max(burst, N)``), whatever the engines. The split is worked out by the owner
when it decides the command and written into the event (``interval_us``, ``partition_burst``),
so the fold needs no configuration.

The bucket is GCRA (the "virtual scheduling" form of a token bucket) kept as one integer,
the theoretical arrival time ``tat`` (µs): a start at ``t`` is allowed when
``t >= tat - (partition_burst - 1) * interval_us``, and moves ``tat`` to
``max(tat, t) + interval_us``. Its tokens at ``t`` are
``min(partition_burst, partition_burst - (tat - t) / interval_us)``. The fold charges each
``JobStarted`` of the type at the event's own time (``occurred_at``, which is the ``now`` the
owner decided the start with), in log order, with integer arithmetic: a rebuild on any
machine reaches the same ``tat``. Setting a limit starts with a full bucket (``tat`` = the
event's time).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from engine.contract import messages as m
from engine.contract.validation import check_task_type, invalid
from engine.domain.pauses import check_task_fields, task_envelope

US = 1_000_000
LIMIT_ENVELOPE = "ratelimit:"
LIMIT_COMMANDS = (m.SetRateLimit, m.ClearRateLimit)
MAX_RATE = 1_000_000.0
"""Starts a second a limit may allow at most (more is no limit)."""
MIN_RATE = 1 / 86_400
"""Starts a second a limit must allow at least: one a day (``1/d``). Less is a pause (``epochq pause``); a
rate near zero would make one partition's spacing between starts overflow its event's 64-bit field."""
MAX_BURST = 1_000_000
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?:/\s*([a-z]+))?\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One task type's limit in one partition: the source of truth for when its next job may start."""

    rate: float  # starts a second across all partitions, as asked
    burst: int  # as asked
    interval_us: int  # this partition's spacing between starts
    capacity: int  # this partition's bucket size
    tat: int  # theoretical arrival time (µs): the bucket is full from then on

    def ready_at(self) -> int:
        """The first time (µs) a start is allowed."""
        return self.tat - (self.capacity - 1) * self.interval_us

    def allows(self, now: int) -> bool:
        """Whether a job of the type may start at ``now``."""
        return now >= self.ready_at()

    def tokens(self, now: int) -> float:
        """Starts available at ``now`` (fractional: the next one is that far along)."""
        return max(0.0, min(float(self.capacity), self.capacity - (self.tat - now) / self.interval_us))

    def started(self, at: int) -> Bucket:
        """The bucket after a start at ``at``."""
        return replace(self, tat=max(self.tat, at) + self.interval_us)


def split(rate: float, burst: int, partitions: int) -> tuple[int, int]:
    """(interval_us, partition_burst): one partition's share of ``rate`` a second and of ``burst``."""
    return max(1, math.ceil(US * partitions / rate)), max(1, burst // partitions)


def parse_rate(text: str) -> float:
    """Starts a second from ``N``, ``N/s``, ``N/m``, ``N/h`` or ``N/d``; ValidationError naming ``--rate``."""
    match = _RATE.fullmatch(text)
    unit = (match.group(2) or "s").lower() if match else ""
    if match is None or unit not in _UNITS:
        raise invalid("rate", f"expected N/s, N/m, N/h or N/d (e.g. 10/s), got {text!r}")
    return check_rate(float(match.group(1)) / _UNITS[unit])


def check_rate(rate: object) -> float:
    """A rate: a finite number of starts a second, from MIN_RATE (one a day) to MAX_RATE."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate):
        raise invalid("rate", f"must be a finite number, got {rate!r}")
    if not MIN_RATE <= rate <= MAX_RATE:
        raise invalid("rate", f"must be from 1/d ({MIN_RATE:.3g} a second) to {MAX_RATE:g} a second, got {rate:g} "
                              "(to start none at all, pause the task type)")
    return float(rate)


def check_burst(burst: object) -> int:
    """A burst: an integer 1..MAX_BURST."""
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        raise invalid("burst", f"must be an integer 1-{MAX_BURST}, got {burst!r}")
    return burst


def limit_envelope(task_type: str, partition: int, partitions: int) -> str:
    """The envelope id of a rate-limit command for ``partition`` (``ratelimit:<type>#<n>`` hashing there)."""
    return task_envelope(task_type, partition, partitions, LIMIT_ENVELOPE)


def is_limit_command(command: m.Command) -> bool:
    """Whether a command sets or clears a task type's rate limit (its "job" is the task type in one partition)."""
    return isinstance(command.body, LIMIT_COMMANDS)


def check_limit_command(command: m.Command) -> None:
    """A set or clear's fields, by the rules every command's are checked by; ValidationError naming one."""
    body = command.body
    assert isinstance(body, LIMIT_COMMANDS)
    check_task_type(body.task_type)
    if isinstance(body, m.SetRateLimit):
        check_rate(body.rate)
        check_burst(body.burst)
    check_task_fields(body)


def decide_limit(command: m.Command, current: Callable[[str], Bucket | None], partitions: int) -> m.EventBody:
    """The event of a set or clear in this partition (of ``partitions``): the change, or a refusal if none."""
    body = command.body
    assert isinstance(body, LIMIT_COMMANDS)
    name, limit = type(body).__name__, current(body.task_type)
    if isinstance(body, m.ClearRateLimit):
        if limit is None:
            return m.CommandRefused(name, "unlimited", f"task type {body.task_type!r} has no rate limit")
        return m.RateLimitCleared(body.task_type, body.reason, body.requested_by)
    interval, capacity = split(body.rate, body.burst, partitions)
    if limit is not None and (limit.interval_us, limit.capacity) == (interval, capacity):
        return m.CommandRefused(name, "limited", f"task type {body.task_type!r} already has this rate limit")
    return m.RateLimitSet(body.task_type, body.rate, body.burst, interval, capacity, body.reason, body.requested_by)


def bucket_of(event: m.RateLimitSet, at: int) -> Bucket:
    """The bucket a ``RateLimitSet`` at ``at`` starts: full."""
    return Bucket(event.rate, event.burst, event.interval_us, event.partition_burst, at)


def shown_rate(rate: float) -> str:
    """A rate as people write it: ``10/s``, ``12.5/s``, ``30/m``, ``2/h``."""
    if rate >= 1:
        return f"{round(rate, 3):g}/s"
    per_unit = [(unit, rate * seconds) for unit, seconds in (("m", 60.0), ("h", 3600.0), ("d", 86400.0))]
    whole = [(unit, per) for unit, per in per_unit if per >= 1 and abs(per - round(per)) < 1e-6]
    unit, per = whole[0] if whole else next(((u, p) for u, p in per_unit if p >= 1), per_unit[-1])
    return f"{round(per) if whole else round(per, 3):g}/{unit}"
