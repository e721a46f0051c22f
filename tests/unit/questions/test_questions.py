"""The questions the console asks that were worked out in the console before: pure parts, no broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from engine.console.got import get
from engine.contract import messages as m
from engine.domain.breaker import BreakerStatus
from engine.domain.schedules import LABEL_SCHEDULE, ScheduleView
from engine.errors import RetryableError
from engine.questions import stores
from engine.questions.logged import iso_time
from engine.questions.probe import asked
from engine.questions.schedules import next_runs, runs_filter
from projections.views.breakers import BreakerRecord

HOURLY = ScheduleView("hourly", "acme", "report", "0 * * * *", "UTC", m.Payload(b"{}"), 5, False, "skip", 10,
                      "first", 0, 0, 0)


def _unreachable() -> None:
    raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))


def test_a_kafka_error_of_a_read_comes_out_as_the_epochq_error_it_means() -> None:
    with pytest.raises(RetryableError):
        asked(_unreachable)
    assert asked(lambda: 7) == 7
    assert (get(_unreachable).problem or "").startswith("the log is unreachable")


def test_a_schedules_next_runs_and_its_jobs_filter() -> None:
    assert next_runs(HOURLY, 0, 3) == [3_600_000_000, 7_200_000_000, 10_800_000_000]  # paused: still a calendar
    flt = runs_filter(HOURLY)
    assert flt.tenant == "acme" and flt.labels == ((LABEL_SCHEDULE, "hourly"),) and flt.status is None


def test_tripped_breakers_are_the_ones_not_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [BreakerRecord(t, s, 1, None, None, "") for t, s in
               (("a", BreakerStatus.CLOSED), ("b", BreakerStatus.OPEN), ("c", BreakerStatus.HALF_OPEN))]
    monkeypatch.setattr(stores, "breaker_report", lambda settings: records)
    assert [b.task_type for b in stores.tripped_breakers(None)] == ["b", "c"]  # type: ignore[arg-type]


def test_iso_time_is_utc_milliseconds_or_the_bare_number() -> None:
    assert iso_time(1_500) == "1970-01-01T00:00:00.001Z"
    assert iso_time(10**20) == f"{10**20} µs"
