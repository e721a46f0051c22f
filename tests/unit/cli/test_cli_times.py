"""The CLI's one time parser: filters look back (``15m`` = 15 minutes ago), due times look ahead (``+5m``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.cli.times import Looks, parse_time, shown, since_us
from engine.errors import ValidationError

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "ago"), [("15m", 900), ("15 min", 900), ("2h", 7200), ("1d", 86400),
                                           ("30s", 30), ("15m ago", 900), ("-15m", 900), ("1.5h", 5400),
                                           ("2 days ago", 172800)])
def test_a_filter_duration_means_that_long_ago(text: str, ago: int) -> None:
    assert parse_time(text, "--since", NOW, Looks.BACK) == NOW - timedelta(seconds=ago)
    assert since_us(text, "--since", NOW) == int((NOW - timedelta(seconds=ago)).timestamp() * 1_000_000)


@pytest.mark.parametrize(("text", "when"), [
    ("2026-05-01T00:00:00Z", datetime(2026, 5, 1, tzinfo=UTC)),
    ("2026-05-01", datetime(2026, 5, 1, tzinfo=UTC)),  # no zone: UTC
    ("2026-05-01T02:00:00+02:00", datetime(2026, 5, 1, tzinfo=UTC)),
])
def test_a_filter_takes_iso_8601_utc_without_a_zone(text: str, when: datetime) -> None:
    assert parse_time(text, "--since", NOW, Looks.BACK) == when


@pytest.mark.parametrize("text", ["+5m", "in 5m"])
def test_a_filter_refuses_a_time_in_the_future_and_says_what_to_give(text: str) -> None:
    with pytest.raises(ValidationError, match=r"^--since: '.*' is in the future, and a filter looks back: "
                                              r"give 5m for that long ago"):
        parse_time(text, "--since", NOW, Looks.BACK)


@pytest.mark.parametrize("looks", list(Looks))
@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "in a bit", "15x"])
def test_a_time_that_is_not_one_is_refused_in_one_wording(text: str, looks: Looks) -> None:
    with pytest.raises(ValidationError, match=f"^--since: '{text}' is not a time: give .* or ISO-8601, e.g. "
                                              "2026-12-01T09:00:00Z$"):
        parse_time(text, "--since", NOW, looks)


@pytest.mark.parametrize(("text", "seconds"), [("+5m", 300), ("in 2h", 7200), ("+30s", 30), ("+1.5d", 129600),
                                               ("IN 10 min", 600), ("5m ago", -300), ("-1h", -3600),
                                               ("2026-06-01T12:00:05+00:00", 5)])
def test_a_due_time_looks_ahead(text: str, seconds: int) -> None:
    assert parse_time(text, "run_at", NOW) == NOW + timedelta(seconds=seconds)


def test_a_bare_duration_for_a_due_time_is_refused_as_ambiguous() -> None:
    with pytest.raises(ValidationError, match=r"^run_at: '5m' could mean either way: give \+5m \(from now\) or 5m ago"):
        parse_time("5m", "run_at", NOW)


def test_a_due_time_needs_a_zone() -> None:
    with pytest.raises(ValidationError, match="^run_at: '2026-06-01T09:00' has no time zone: give one"):
        parse_time("2026-06-01T09:00", "run_at", NOW)


@pytest.mark.parametrize("looks", list(Looks))
def test_a_time_past_any_date_is_refused(looks: Looks) -> None:
    text = "+99999999d" if looks is Looks.AHEAD else "99999999d"
    with pytest.raises(ValidationError, match="is further from now than any date"):
        parse_time(text, "--since", NOW, looks)


def test_times_are_shown_one_way() -> None:
    assert shown(1_780_315_200_120_000) == "2026-06-01T12:00:00.120Z"
    assert shown(None) == "-"
