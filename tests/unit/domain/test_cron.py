"""Recurring schedules: occurrences across DST in New York and Berlin, misfire policies, validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.contract.ids import occurrence_job_id
from engine.domain.cron import (
    SECOND, DstPolicy, MisfirePolicy, Schedule, due_occurrences, next_after_run, next_occurrences,
)
from engine.errors import ValidationError

NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"
HOUR = 3_600 * SECOND
POLICIES = ("first", "both", "skip")


def schedule(cron: str = "0 * * * *", timezone: str = "UTC", **kwargs: Any) -> Schedule:
    return Schedule(schedule_id="nightly", tenant_id="acme", task_type="report.build", cron=cron,
                    timezone=timezone, **kwargs)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    """Microseconds of a UTC wall time."""
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()) * SECOND


def local(timezone: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    """Microseconds of a local wall time (its first pass, if it happens twice)."""
    return int(datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(timezone)).timestamp()) * SECOND


def labels(occurrences: list[int], timezone: str) -> list[str]:
    """Occurrences as readable local times with their zone abbreviation (failure messages)."""
    zone = ZoneInfo(timezone)
    return [f"{datetime.fromtimestamp(o / SECOND, zone):%m-%d %H:%M %Z}" for o in occurrences]


# --- DST: spring forward (a local hour that does not exist) -------------------------------

SPRING = {
    NEW_YORK: ((2026, 3, 7, 12), utc(2026, 3, 8, 7), [utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)]),
    BERLIN: ((2026, 3, 28, 12), utc(2026, 3, 29, 1), [utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]),
}


@pytest.mark.parametrize("timezone", [NEW_YORK, BERLIN])
@pytest.mark.parametrize("policy", POLICIES)
def test_a_nonexistent_time_runs_once_when_the_clock_jumps_or_is_skipped(timezone: str, policy: str) -> None:
    """02:30 does not exist on the spring-forward day: first/both run at 03:00 (the jump), skip skips the day."""
    start, jump, following = SPRING[timezone]
    got = next_occurrences(schedule("30 2 * * *", timezone, dst_policy=policy), local(timezone, *start), 2)
    expected = following if policy == "skip" else [jump, following[0]]
    assert got == expected, labels(got, timezone)
    assert labels([jump], timezone)[0].endswith(("03:00 EDT", "03:00 CEST"))


@pytest.mark.parametrize("policy", POLICIES)
def test_several_nonexistent_times_collapse_into_one_run(policy: str) -> None:
    got = next_occurrences(schedule("*/15 * * * *", NEW_YORK, dst_policy=policy), utc(2026, 3, 8, 6, 30), 4)
    assert got == [utc(2026, 3, 8, 6, 45), utc(2026, 3, 8, 7), utc(2026, 3, 8, 7, 15), utc(2026, 3, 8, 7, 30)]


# --- DST: fall back (a local hour that happens twice) -------------------------------------

FALL = {
    # zone: (cron, start, first pass, second pass, the next day)
    NEW_YORK: ("30 1 * * *", (2026, 10, 31, 12), utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30),
               utc(2026, 11, 2, 6, 30)),
    BERLIN: ("30 2 * * *", (2026, 10, 24, 12), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30),
             utc(2026, 10, 26, 1, 30)),
}


@pytest.mark.parametrize("timezone", [NEW_YORK, BERLIN])
@pytest.mark.parametrize("policy", POLICIES)
def test_an_ambiguous_time_runs_at_the_first_pass_at_both_or_at_neither(timezone: str, policy: str) -> None:
    cron, start, first, second, next_day = FALL[timezone]
    got = next_occurrences(schedule(cron, timezone, dst_policy=policy), local(timezone, *start), 3)
    expected = {"first": [first, next_day], "both": [first, second, next_day], "skip": [next_day]}[policy]
    assert got == expected[:3] + next_occurrences(schedule(cron, timezone), next_day, 3 - len(expected))


def test_the_first_pass_is_daylight_time_and_the_second_standard_time() -> None:
    got = next_occurrences(schedule("30 1 * * *", NEW_YORK, dst_policy="both"), utc(2026, 11, 1), 2)
    assert labels(got, NEW_YORK) == ["11-01 01:30 EDT", "11-01 01:30 EST"]


# --- hourly across DST: no duplicate and no gap in UTC, except as the policy says ----------


def hourly_gaps(timezone: str, policy: str, start: int) -> list[int]:
    got = next_occurrences(schedule("0 * * * *", timezone, dst_policy=policy), start, 8)
    assert len(set(got)) == len(got) and got == sorted(got)
    return [(b - a) // HOUR for a, b in pairwise(got)]


@pytest.mark.parametrize("timezone", [NEW_YORK, BERLIN])
@pytest.mark.parametrize("policy", POLICIES)
def test_hourly_across_spring_forward_is_even_in_utc(timezone: str, policy: str) -> None:
    assert hourly_gaps(timezone, policy, local(timezone, 2026, 3, 8 if timezone == NEW_YORK else 29)) == [1] * 7


@pytest.mark.parametrize("timezone", [NEW_YORK, BERLIN])
@pytest.mark.parametrize(("policy", "gaps"), [
    ("both", [1] * 7),
    ("first", [1, 2, 1, 1, 1, 1]),   # the repeated hour runs once, at its first pass
    ("skip", [3, 1, 1, 1, 1]),       # the repeated hour does not run at all
])
def test_hourly_across_fall_back_gaps_only_as_the_policy_says(timezone: str, policy: str, gaps: list[int]) -> None:
    start = (local(timezone, 2026, 11, 1) if timezone == NEW_YORK else local(timezone, 2026, 10, 25, 1)) - 1
    assert hourly_gaps(timezone, policy, start)[: len(gaps)] == gaps


def test_both_interleaves_the_two_passes_in_utc_order() -> None:
    got = next_occurrences(schedule("*/30 * * * *", NEW_YORK, dst_policy="both"), utc(2026, 11, 1, 4), 6)
    assert labels(got, NEW_YORK) == ["11-01 00:30 EDT", "11-01 01:00 EDT", "11-01 01:30 EDT",
                                     "11-01 01:00 EST", "11-01 01:30 EST", "11-01 02:00 EST"]


@pytest.mark.parametrize("policy", POLICIES)
def test_starting_inside_the_repeated_hour_misses_nothing_and_repeats_nothing(policy: str) -> None:
    sched = schedule("*/20 * * * *", NEW_YORK, dst_policy=policy)
    whole = next_occurrences(sched, utc(2026, 11, 1, 4), 12)
    for after in (utc(2026, 11, 1, 5, 10), utc(2026, 11, 1, 5, 50), utc(2026, 11, 1, 6, 10), utc(2026, 11, 1, 6, 40)):
        assert next_occurrences(sched, after, 3) == [o for o in whole if o > after][:3]


# --- occurrences in general --------------------------------------------------------------


def test_occurrences_are_strictly_after_the_bound() -> None:
    sched = schedule("0 * * * *")
    assert next_occurrences(sched, utc(2026, 1, 1, 10), 2) == [utc(2026, 1, 1, 11), utc(2026, 1, 1, 12)]
    assert next_occurrences(sched, utc(2026, 1, 1, 10) - 1, 1) == [utc(2026, 1, 1, 10)]
    assert next_occurrences(sched, utc(2026, 1, 1, 10), 0) == []


def test_seconds_field_and_a_calendar_that_ends() -> None:
    every_second = schedule("* * * * * *")
    assert next_occurrences(every_second, utc(2026, 1, 1), 3) == [utc(2026, 1, 1) + n * SECOND for n in (1, 2, 3)]
    finished = schedule("0 0 1 1 * 0 2020")
    assert next_occurrences(finished, utc(2026, 1, 1), 3) == []
    assert next_after_run(finished, utc(2020, 1, 1), utc(2026, 1, 1)) is None


def test_hashed_minutes_are_stable_per_schedule() -> None:
    first = next_occurrences(schedule("H * * * *"), utc(2026, 1, 1), 3)
    assert first == next_occurrences(schedule("H * * * *"), utc(2026, 1, 1), 3)
    assert {(b - a) for a, b in pairwise(first)} == {HOUR}


def test_occurrence_job_ids_collide_for_the_same_occurrence() -> None:
    occurrence = next_occurrences(schedule(), utc(2026, 1, 1), 1)[0]
    assert occurrence_job_id("nightly", occurrence) == occurrence_job_id("nightly", occurrence)
    assert occurrence_job_id("nightly", occurrence) != occurrence_job_id("nightly", occurrence + HOUR)


ZONES = st.sampled_from(["UTC", NEW_YORK, BERLIN, "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago"])
CRONS = st.sampled_from(["*/7 * * * *", "0 * * * *", "30 1,2 * * *", "15 */3 * * *", "0 2 * * SUN", "*/20 0-3 * * *"])
INSTANTS = st.integers(utc(2026, 1, 1), utc(2027, 1, 1))


@settings(max_examples=150, deadline=None)
@given(ZONES, CRONS, st.sampled_from(POLICIES), INSTANTS, st.integers(1, 40) | st.just(72))
def test_looking_back_agrees_with_looking_forward(zone: str, cron: str, policy: str, start: int, hours: int) -> None:
    """Catch-up (a backward scan from now) sees exactly the occurrences a forward scan lists."""
    sched = schedule(cron, zone, dst_policy=policy, misfire_policy="catch_up", max_catch_up=1000)  # the cap
    now = start + hours * HOUR
    listed = next_occurrences(sched, start, 9 * hours + 9)
    forward = [o for o in listed if o <= now]
    assert len(forward) < len(listed) or len(listed) < 9 * hours + 9
    assert forward == sorted(set(forward))
    assert due_occurrences(sched, start, now) == forward


# --- misfires: the engine was down for 5 hours under an hourly schedule ---------------------

LAST_FIRED = utc(2026, 6, 1, 10)
BACK_UP = utc(2026, 6, 1, 15, 30)
MISSED = [utc(2026, 6, 1, h) for h in (11, 12, 13, 14, 15)]


@pytest.mark.parametrize(("policy", "extra", "now", "expected"), [
    ("skip", {}, BACK_UP, []),                                              # 15:00 is 30 minutes old
    ("skip", {}, utc(2026, 6, 1, 15, 0, 30), [MISSED[-1]]),                 # 15:00 is only 30 s late
    ("skip", {"misfire_grace_us": 3_600 * SECOND}, BACK_UP, [MISSED[-1]]),
    ("run_once", {}, BACK_UP, [MISSED[-1]]),
    ("catch_up", {}, BACK_UP, MISSED),
    ("catch_up", {"max_catch_up": 3}, BACK_UP, MISSED[-3:]),
])
def test_misfire_policies_after_an_outage(policy: str, extra: dict[str, Any], now: int, expected: list[int]) -> None:
    sched = schedule("0 * * * *", NEW_YORK, misfire_policy=policy, **extra)
    assert due_occurrences(sched, LAST_FIRED, now) == expected


def test_nothing_is_owed_on_time_or_when_paused() -> None:
    assert due_occurrences(schedule(), LAST_FIRED, LAST_FIRED + HOUR - 1) == []
    assert due_occurrences(schedule(), LAST_FIRED, LAST_FIRED + HOUR) == [LAST_FIRED + HOUR]
    paused = schedule(misfire_policy="catch_up", enabled=False)
    assert due_occurrences(paused, LAST_FIRED, BACK_UP) == [] and next_after_run(paused, LAST_FIRED, BACK_UP) is None


@pytest.mark.parametrize(("policy", "expected"), [
    ("skip", utc(2026, 6, 1, 16)),
    ("run_once", MISSED[-1]),
    ("catch_up", MISSED[0]),
])
def test_next_after_run_arms_what_the_policy_still_owes(policy: str, expected: int) -> None:
    assert next_after_run(schedule(misfire_policy=policy), LAST_FIRED, BACK_UP) == expected


def test_next_after_run_on_time_arms_the_next_occurrence() -> None:
    finished_at = LAST_FIRED + 5 * 60 * SECOND
    for policy in MisfirePolicy:
        assert next_after_run(schedule(misfire_policy=policy), LAST_FIRED, finished_at) == LAST_FIRED + HOUR


def test_capped_catch_up_runs_one_after_another_and_never_exceeds_the_cap() -> None:
    sched = schedule(misfire_policy="catch_up", max_catch_up=3)
    runs, finished, now = [], LAST_FIRED, BACK_UP
    while (armed := next_after_run(sched, finished, now)) is not None and armed <= now:
        runs.append(armed)
        finished, now = armed, now + 60 * SECOND  # each catch-up run takes a minute
    assert runs == MISSED[-3:] and armed == utc(2026, 6, 1, 16)


def test_a_long_run_under_skip_skips_the_occurrences_it_overlapped() -> None:
    sched = schedule("*/10 * * * *")
    started = utc(2026, 6, 1, 10)
    assert next_after_run(sched, started, started + 25 * 60 * SECOND) == utc(2026, 6, 1, 10, 30)
    assert next_after_run(sched, started, started + 20 * 60 * SECOND + 5 * SECOND) == utc(2026, 6, 1, 10, 20)


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "not a cron"}, "cron"),
    ({"cron": ""}, "cron"),
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"timezone": "../../etc/passwd"}, "timezone"),
    ({"timezone": ""}, "timezone"),
    ({"misfire_policy": "sometimes"}, "misfire_policy"),
    ({"dst_policy": "maybe"}, "dst_policy"),
    ({"max_catch_up": 0}, "max_catch_up"),
    ({"misfire_grace_us": -1}, "misfire_grace_us"),
    ({"priority": 12}, "priority"),
    ({"payload": "text"}, "payload"),
    ({"content_type": ""}, "content_type"),
    ({"enabled": "yes"}, "enabled"),
    ({"schedule_id": ""}, "schedule_id"),
    ({"tenant_id": "a\x00b"}, "tenant_id"),
])
def test_invalid_fields_are_named(kwargs: dict[str, Any], field: str) -> None:
    fields = {"schedule_id": "s", "tenant_id": "acme", "task_type": "t", "cron": "0 * * * *", **kwargs}
    with pytest.raises(ValidationError, match=f"^{field}"):
        Schedule(**fields)


def test_policies_are_normalized_to_enums_and_times_kept_apart() -> None:
    sched = schedule("30 2 * * *", BERLIN, misfire_policy="catch_up", dst_policy="both")
    assert sched.misfire_policy is MisfirePolicy.CATCH_UP and sched.dst_policy is DstPolicy.BOTH
    assert sched.cron == "30 2 * * *" and sched.timezone == BERLIN and sched.zone == ZoneInfo(BERLIN)
    assert timedelta(microseconds=sched.misfire_grace_us) == timedelta(minutes=1)
