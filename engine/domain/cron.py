"""When a recurring schedule runs: cron occurrences in its own time zone, mapped to UTC by explicit policies. Pure.

A ``Schedule`` keeps its cron expression and its IANA time zone apart; occurrences are
computed as local wall-clock times (croniter over naive datetimes, which knows nothing of
DST) and mapped to UTC here, with ``zoneinfo`` and PEP 495 ``fold``, so the DST behaviour
is ours and written down rather than croniter's:

- A local time that does not exist (spring forward: 02:30 on 2026-03-08 in New York) is
  detected because it does not survive a round trip through UTC. ``first`` and ``both``
  run it once, at the instant the clock jumps (03:00 EDT, like Vixie cron; there is only
  one such instant, so several skipped times collapse into one run). ``skip`` drops it.
- A local time that happens twice (fall back: 01:30 on 2026-11-01 in New York) is
  detected because ``fold=0`` and ``fold=1`` give different UTC offsets. ``first`` runs it
  at the first pass (01:30 EDT), ``both`` at both passes, ``skip`` at neither.

The policy applies to every occurrence in the affected local hour, so with ``first`` an
hourly schedule has a two-hour gap in UTC on the fall-back night, and with ``skip`` a
three-hour one; use ``both`` (or the ``UTC`` zone) for an even cadence. Occurrences are
UTC instants in microseconds, strictly increasing, never duplicated.

Misfires — occurrences that passed while nothing fired them (engine down, a run that took
longer than the period, a late timer) — follow the schedule's ``misfire_policy``:

- ``skip``: fire only the latest missed occurrence, and only if it is at most
  ``misfire_grace_us`` old (an occurrence merely late by a timer tick still runs); older
  ones are dropped and the schedule waits for the next one.
- ``run_once``: fire one catch-up run, the latest missed occurrence, however old.
- ``catch_up``: fire every missed occurrence, oldest first, but at most ``max_catch_up``:
  beyond the cap the oldest are dropped. Keeping the most recent ones is what lets the cap
  be applied again statelessly after each run (``next_after_run``) without ever growing
  the backlog past it.

A schedule advances when a run finishes: ``next_after_run`` gives the occurrence to arm
next — in the past (fire at once) when the policy says a missed one is still owed, in the
future otherwise. An occurrence's job id is ``engine.contract.ids.occurrence_job_id``
of (schedule, occurrence), so a double firing collides instead of running twice.

Record computed occurrences in events (the armed one, the fired ones) and never recompute
them in a fold: a tzdata or croniter upgrade may move them, and a rebuild must not.

Cron syntax is croniter's: five fields (minute resolution), a sixth for seconds (last),
a seventh for the year; ``@hourly`` and friends; ``H`` hashed by the schedule id.
Expressions that can never match (``0 0 30 2 *``) are refused.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import islice
from typing import NamedTuple, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from engine.contract.ids import validate_name, validate_task_type, validate_tenant_id
from engine.contract.validation import MAX_CATCH_UP
from engine.domain.lanes import parse_priority
from engine.errors import ValidationError

SECOND = 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)
P = TypeVar("P", bound=StrEnum)


class MisfirePolicy(StrEnum):
    """What a schedule owes for occurrences that passed without being fired."""

    SKIP = "skip"
    RUN_ONCE = "run_once"
    CATCH_UP = "catch_up"


class DstPolicy(StrEnum):
    """How a schedule treats local times that do not exist or happen twice."""

    FIRST = "first"
    BOTH = "both"
    SKIP = "skip"


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A recurring job: what to submit, on which local calendar, and what to do about misfires and DST.

    Validated on construction; a bad value raises ``ValidationError`` whose message starts
    with the field's name. Policy fields accept their string values and are normalized to
    the enums.
    """

    schedule_id: str
    tenant_id: str
    task_type: str
    cron: str
    timezone: str = "UTC"
    payload: bytes = b""
    content_type: str = "application/json"
    priority: int = 5
    enabled: bool = True
    misfire_policy: MisfirePolicy = MisfirePolicy.SKIP
    max_catch_up: int = 10
    misfire_grace_us: int = 60 * SECOND
    dst_policy: DstPolicy = DstPolicy.FIRST

    def __post_init__(self) -> None:
        validate_name("schedule_id", self.schedule_id)
        validate_tenant_id(self.tenant_id)
        validate_task_type(self.task_type)
        _validate_cron(self.cron, self.schedule_id)
        _zone(self.timezone)
        _validate_payload(self.payload, self.content_type)
        object.__setattr__(self, "priority", parse_priority(self.priority))
        object.__setattr__(self, "misfire_policy", _policy("misfire_policy", MisfirePolicy, self.misfire_policy))
        object.__setattr__(self, "dst_policy", _policy("dst_policy", DstPolicy, self.dst_policy))
        _validate_misfire_limits(self.max_catch_up, self.misfire_grace_us)
        if not isinstance(self.enabled, bool):
            raise ValidationError(f"enabled: must be a bool, got {type(self.enabled).__name__}")

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)


def _validate_cron(expression: object, schedule_id: str) -> None:
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError("cron: must be a non-empty cron expression string")
    try:
        croniter.expand(expression, hash_id=schedule_id.encode(), strict=True)
    except (CroniterError, ValueError, TypeError, KeyError) as e:
        raise ValidationError(f"cron: invalid expression {expression!r}: {e}") from e


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ValidationError("timezone: must be an IANA time zone name such as 'Europe/Berlin'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValidationError(f"timezone: unknown IANA time zone {name!r}") from e


def _validate_payload(payload: object, content_type: object) -> None:
    if not isinstance(payload, bytes):
        raise ValidationError(f"payload: must be bytes, got {type(payload).__name__}")
    if not isinstance(content_type, str) or not content_type:
        raise ValidationError("content_type: must be a non-empty string")


def _policy(field: str, kind: type[P], value: object) -> P:
    choices = [p.value for p in kind]
    if isinstance(value, str) and value in choices:
        return kind(value)
    raise ValidationError(f"{field}: unknown policy {value!r}; expected one of {', '.join(choices)}")


def _validate_misfire_limits(max_catch_up: object, grace_us: object) -> None:
    if not isinstance(max_catch_up, int) or isinstance(max_catch_up, bool) or not 1 <= max_catch_up <= MAX_CATCH_UP:
        raise ValidationError(f"max_catch_up: must be an int from 1 to {MAX_CATCH_UP}, got {max_catch_up!r}",
                              "max_catch_up")
    if not isinstance(grace_us, int) or isinstance(grace_us, bool) or grace_us < 0:
        raise ValidationError(f"misfire_grace_us: must be an int >= 0 (microseconds), got {grace_us!r}")


# --- local wall clock <-> UTC ------------------------------------------------------------


def _us(moment: datetime) -> int:
    return (moment - EPOCH) // ONE_US


def _wall(us: int, zone: ZoneInfo) -> datetime:
    """The naive local wall-clock time of the UTC instant ``us``."""
    return (EPOCH + timedelta(microseconds=us)).astimezone(zone).replace(tzinfo=None)


def _offset_us(us: int, zone: ZoneInfo) -> int:
    offset = (EPOCH + timedelta(microseconds=us)).astimezone(zone).utcoffset()
    return 0 if offset is None else offset // ONE_US


def _fold_shift_us(wall: datetime, zone: ZoneInfo) -> int:
    """How much later the second pass of ``wall`` is than the first (0 unless ambiguous or in a gap)."""
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    return 0 if first is None or second is None else abs((first - second) // ONE_US)


def _transition_us(low_us: int, high_us: int, zone: ZoneInfo) -> int:
    """The instant in ``(low, high]`` where the zone's offset changes (whole seconds, bisected)."""
    low, high = low_us // SECOND, -(-high_us // SECOND)
    before = _offset_us(low * SECOND, zone)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_us(middle * SECOND, zone) == before:
            low = middle
        else:
            high = middle
    return high * SECOND


class _Mapped(NamedTuple):
    """A local wall time in UTC: its earliest and latest reading, and the instants the policy runs."""

    earliest: int
    latest: int
    runs: tuple[int, ...]


def _map(wall: datetime, zone: ZoneInfo, policy: DstPolicy) -> _Mapped:
    """The UTC instants at which local wall time ``wall`` runs under ``policy``."""
    first = _us(wall.replace(tzinfo=zone, fold=0))
    second = _us(wall.replace(tzinfo=zone, fold=1))
    if _wall(first, zone) != wall:  # nonexistent: in a gap, fold=0 reads it with the old offset
        jump = _transition_us(second, first, zone)
        return _Mapped(jump, jump, () if policy is DstPolicy.SKIP else (jump,))
    if first == second:
        return _Mapped(first, first, (first,))
    runs = {DstPolicy.FIRST: (first,), DstPolicy.BOTH: (first, second), DstPolicy.SKIP: ()}[policy]
    return _Mapped(first, second, runs)


# --- occurrences -------------------------------------------------------------------------


def _walls(schedule: Schedule, start: datetime, forward: bool) -> Iterator[datetime]:
    """Local wall times matching the cron expression, strictly after (or before) ``start``."""
    it = croniter(schedule.cron, start, hash_id=schedule.schedule_id.encode(), is_prev=not forward)
    step = it.get_next if forward else it.get_prev
    while True:
        try:
            yield step(datetime)
        except CroniterBadDateError:
            return


def _start_wall(bound_us: int, zone: ZoneInfo, forward: bool) -> datetime:
    """A local wall time far enough before (after) ``bound_us`` that no occurrence beyond it is missed."""
    wall = _wall(bound_us, zone).replace(microsecond=0)
    margin = timedelta(microseconds=_fold_shift_us(wall, zone)) + timedelta(seconds=1)
    return wall - margin if forward else wall + margin


def _scan(schedule: Schedule, bound_us: int, forward: bool) -> Iterator[int]:
    """Occurrences strictly after ``bound_us`` ascending, or at/before it descending; no duplicates.

    Local order and UTC order differ only inside a fold (``both`` runs the second pass of
    01:00 after the first pass of 01:30), so instants wait in a heap until the wall-clock
    scan's watermark — the earliest (latest) reading of the current wall time, which never
    goes back — has passed them.
    """
    zone, sign, last = schedule.zone, 1 if forward else -1, None
    pending: list[int] = []
    for wall in _walls(schedule, _start_wall(bound_us, zone, forward), forward):
        mapped = _map(wall, zone, schedule.dst_policy)
        for run in mapped.runs:
            if (run > bound_us) if forward else (run <= bound_us):
                heapq.heappush(pending, sign * run)
        mark = sign * (mapped.earliest if forward else mapped.latest)
        while pending and pending[0] <= mark:
            run = sign * heapq.heappop(pending)
            if run != last:
                yield run
                last = run
    yield from (sign * key for key in sorted(set(pending)) if sign * key != last)


def next_occurrences(schedule: Schedule, after_us: int, count: int) -> list[int]:
    """The next ``count`` occurrences strictly after ``after_us`` (UTC µs, ascending); fewer if the calendar ends.

    Ignores ``enabled``: a paused schedule still has a calendar to show.
    """
    return list(islice(_scan(schedule, after_us, forward=True), max(0, count)))


def _missed(schedule: Schedule, last_fired_us: int, now_us: int, keep: int) -> list[int]:
    """The latest ``keep`` occurrences in ``(last_fired_us, now_us]``, oldest first."""
    recent = []
    for occurrence in islice(_scan(schedule, now_us, forward=False), keep):
        if occurrence <= last_fired_us:
            break
        recent.append(occurrence)
    return recent[::-1]


def due_occurrences(schedule: Schedule, last_fired_us: int, now_us: int) -> list[int]:
    """The occurrences to fire at ``now_us``, oldest first, given the last one fired, by the misfire policy.

    ``last_fired_us`` is exclusive: the last occurrence already fired or finished, or for a
    new (or resumed) schedule the time it was created (resumed), so nothing before it is owed.
    A disabled schedule owes nothing.
    """
    if not schedule.enabled:
        return []
    if schedule.misfire_policy is MisfirePolicy.CATCH_UP:
        return _missed(schedule, last_fired_us, now_us, schedule.max_catch_up)
    latest = _missed(schedule, last_fired_us, now_us, 1)
    if schedule.misfire_policy is MisfirePolicy.SKIP and latest and latest[0] < now_us - schedule.misfire_grace_us:
        return []
    return latest


def next_after_run(schedule: Schedule, finished_occurrence_us: int, now_us: int) -> int | None:
    """The occurrence to arm once the run of ``finished_occurrence_us`` has finished at ``now_us``.

    The oldest occurrence still owed by the misfire policy (at or before ``now_us``: fire
    it at once), else the first one after ``now_us``; None if the schedule is disabled or
    its calendar has ended.
    """
    if not schedule.enabled:
        return None
    owed = due_occurrences(schedule, finished_occurrence_us, now_us)
    if owed:
        return owed[0]
    upcoming = next_occurrences(schedule, max(finished_occurrence_us, now_us), 1)
    return upcoming[0] if upcoming else None
