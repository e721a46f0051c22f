"""Per-task-type rate limits: the split across partitions, the GCRA bucket, the decision and the fold (pure)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from engine.contract import messages as m
from engine.contract.partitioner import partition_for
from engine.domain.ratelimits import (
    US, Bucket, check_limit_command, decide_limit, is_limit_command, limit_envelope, parse_rate, shown_rate, split,
)
from engine.errors import ValidationError
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.dispatch import Dispatcher
from projections.batch import Batch
from projections.evolve import fold
from projections.store import open_store
from projections.views.ratelimits import all_limits, charge_rate, fold_limit, read_limit
from tests.unit.factories import claim, command, event
from tests.unit.fakes import Reader

T0 = 1_700_000_000_000_000


@pytest.mark.parametrize(("text", "per_s"), [("10/s", 10.0), ("10", 10.0), ("2.5/s", 2.5), ("30/m", 0.5),
                                             ("36/h", 0.01), ("864/d", 0.01), (" 5 / S ", 5.0), (".5/s", 0.5)])
def test_rates_are_read_per_second(text: str, per_s: float) -> None:
    assert parse_rate(text) == pytest.approx(per_s)


@pytest.mark.parametrize("text", ["fast", "0/s", "-1/s", "10/week", "", "1e9/s", "nan", "10/s/s"])
def test_a_bad_rate_names_the_field(text: str) -> None:
    with pytest.raises(ValidationError, match="^rate: "):
        parse_rate(text)


@pytest.mark.parametrize(("per_s", "shown"), [(10.0, "10/s"), (12.5, "12.5/s"), (0.5, "30/m"), (1 / 3600, "1/h"),
                                              (1 / 7, "8.571/m")])
def test_rates_are_shown_as_people_write_them(per_s: float, shown: str) -> None:
    assert shown_rate(per_s) == shown


def test_the_rate_is_split_evenly_across_partitions_and_the_burst_never_below_one() -> None:
    assert split(10.0, 1, 6) == (600_000, 1)  # each partition: one start every 0.6 s = 10/s in all
    assert split(10.0, 12, 6) == (600_000, 2)
    assert split(10.0, 13, 6) == (600_000, 2)  # rounded down: never more than asked, beyond the floor of one
    assert split(3.0, 1, 1) == (333_334, 1)  # rounded up: never faster than asked
    interval, _ = split(7.0, 1, 32)
    assert 32 * US / interval <= 7.0


def test_a_bucket_allows_its_burst_then_one_start_per_interval() -> None:
    bucket = Bucket(10.0, 3, 100, 3, T0)  # rate, burst, interval_us, capacity, tat
    assert bucket.tokens(T0) == 3.0
    for _ in range(3):
        assert bucket.allows(T0)
        bucket = bucket.started(T0)
    assert not bucket.allows(T0) and bucket.tokens(T0) == 0.0
    assert bucket.ready_at() == T0 + 100 and not bucket.allows(T0 + 99) and bucket.allows(T0 + 100)
    assert bucket.tokens(T0 + 150) == 1.5
    assert bucket.tokens(T0 + 10_000) == 3.0  # never more than its capacity, however long it rested


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(1, 1000), st.lists(st.integers(0, 5000), min_size=1, max_size=200))
def test_a_bucket_never_lets_more_start_than_burst_plus_elapsed_over_interval(capacity: int, interval: int,
                                                                          gaps: list[int]) -> None:
    bucket, now, started, first = Bucket(1.0, capacity, interval, capacity, 0), 0, 0, None
    for gap in gaps:
        now += gap
        while bucket.allows(now):
            bucket, started = bucket.started(now), started + 1
            first = now if first is None else first
    assert started <= capacity + (now - (first or 0)) // interval


@pytest.mark.parametrize("partitions", [1, 6, 32])
def test_each_partition_gets_its_own_envelope(partitions: int) -> None:
    envelopes = [limit_envelope("email.send", p, partitions) for p in range(partitions)]
    assert [partition_for(e, partitions) for e in envelopes] == list(range(partitions))
    assert all(e.startswith("ratelimit:email.send#") for e in envelopes)


def test_set_change_and_clear_with_refusals_when_nothing_changes() -> None:
    reader, env = Reader(), limit_envelope("email.send", 0, 6)
    current = lambda task_type: (r.bucket if (r := read_limit(reader, task_type)) else None)  # noqa: E731
    set_ = command(env, m.SetRateLimit("email.send", 10.0, 12, "smtp quota", "ops"))
    assert is_limit_command(set_) and not is_limit_command(command("j", m.CancelJob()))
    body = decide_limit(set_, current, 6)
    assert body == m.RateLimitSet("email.send", 10.0, 12, 600_000, 2, "smtp quota", "ops")
    assert fold_limit(reader, event(body, env, at=T0))
    record = read_limit(reader, "email.send")
    assert record is not None and record.bucket == Bucket(10.0, 12, 600_000, 2, T0) and record.since == T0
    again = decide_limit(set_, current, 6)
    assert isinstance(again, m.CommandRefused) and "already has this rate limit" in again.reason
    faster = decide_limit(command(env, m.SetRateLimit("email.send", 20.0, 12)), current, 6)
    assert isinstance(faster, m.RateLimitSet) and faster.interval_us == 300_000
    cleared = decide_limit(command(env, m.ClearRateLimit("email.send", "lifted")), current, 6)
    assert cleared == m.RateLimitCleared("email.send", "lifted")
    assert fold_limit(reader, event(cleared, env))
    assert read_limit(reader, "email.send") is None and all_limits(reader) == []
    none = decide_limit(command(env, m.ClearRateLimit("email.send")), current, 6)
    assert isinstance(none, m.CommandRefused) and "has no rate limit" in none.reason


@pytest.mark.parametrize("body", [m.SetRateLimit(" x ", 1.0), m.SetRateLimit("x", 0.0), m.SetRateLimit("x", 1.0, 0),
                                  m.SetRateLimit("x", float("inf")), m.ClearRateLimit("x", 5)])  # type: ignore[arg-type]
def test_bad_fields_are_refused_naming_one(body: m.CommandBody) -> None:
    with pytest.raises(ValidationError):
        check_limit_command(command("ratelimit:x#0", body))


def limited_log(starts: list[int], other_types: int = 0) -> list[m.Event]:
    """A claim, a limit on "email.send" (2 a second in one partition, burst 1), and jobs started at ``starts``."""
    log = [claim(1), event(m.RateLimitSet("email.send", 2.0, 1, 500_000, 1), "ratelimit:email.send#0", at=T0)]
    for n, at in enumerate(starts):
        job = f"job-{n}"
        task = "report.build" if n < other_types else "email.send"
        log += [event(m.JobSubmitted(task, m.Payload(b"{}"), 5, "NORMAL", 3), job, at=at),
                event(m.JobQueued("submitted"), job, at=at),
                event(m.JobStarted(1, at, "w"), job, at=at)]
    return log


def folded(log: list[m.Event], path: Path) -> dict[bytes, bytes]:
    store = open_store(path)
    batch = Batch(store)
    for offset, ev in enumerate(log):
        fold(batch, ev, offset)
    batch.commit()
    items = dict(store.items())
    store.close()
    return items


def test_starts_are_charged_at_their_events_time_and_a_rebuild_is_identical(tmp_path: Path) -> None:
    starts = [T0, T0 + 500_000, T0 + 900_000, T0 + 3_000_000]
    log = limited_log(starts, other_types=0)
    live = folded(log, tmp_path / "live")
    assert folded(log, tmp_path / "rebuild") == live
    store = open_store(tmp_path / "live")
    record = read_limit(store, "email.send")
    store.close()
    # T0 -> tat T0+0.5s; T0+0.5s -> T0+1s; T0+0.9s (early: the fold records what was written) -> T0+1.5s; T0+3s -> +3.5s
    assert record is not None and record.bucket.tat == T0 + 3_500_000


def test_other_task_types_do_not_touch_the_bucket(tmp_path: Path) -> None:
    store_items = folded(limited_log([T0 + 1, T0 + 2], other_types=2), tmp_path / "s")
    store = open_store(tmp_path / "s")
    record = read_limit(store, "email.send")
    store.close()
    assert record is not None and record.bucket.tat == T0 and store_items


def test_dispatch_passes_over_a_limited_job_and_wakes_the_loop_when_its_token_is_due() -> None:
    reader = Reader()
    fold_limit(reader, event(m.RateLimitSet("email.send", 2.0, 1, 500_000, 1), "ratelimit:email.send#0", at=T0))
    partition = SimpleNamespace(batch=reader)
    dispatcher = Dispatcher(BreakerBoard({}), lambda tenant: 1.0, "w", lambda *args: None)
    assert dispatcher.rate_allows(partition, "email.send", T0) and dispatcher.wake.at is None  # type: ignore[arg-type]
    charge_rate(reader, SimpleNamespace(task_type="email.send"), T0)  # type: ignore[arg-type]  # one start at T0
    assert not dispatcher.rate_allows(partition, "email.send", T0 + 100_000)  # type: ignore[arg-type]
    assert dispatcher.wake.at == T0 + 500_000
    assert dispatcher.rate_allows(partition, "report.build", T0)  # type: ignore[arg-type]  # other types: no limit
    assert dispatcher.rate_allows(partition, "email.send", T0 + 500_000)  # type: ignore[arg-type]


def folded_in_two(log: list[m.Event], path: Path, split_at: int) -> dict[bytes, bytes]:
    """Fold ``log[:split_at]``, commit, reopen the store, fold the rest: a restart half-way through."""
    for part, first in ((log[:split_at], 0), (log[split_at:], split_at)):
        store = open_store(path)
        batch = Batch(store)
        for offset, ev in enumerate(part, first):
            fold(batch, ev, offset)
        batch.commit()
        store.close()
    store = open_store(path)
    items = dict(store.items())
    store.close()
    return items


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2_000_000), min_size=1, max_size=30), st.integers(0, 30), st.data())
def test_a_limited_log_folds_the_same_whole_or_in_two(gaps: list[int], others: int, data: st.DataObject) -> None:
    times = [T0 + sum(gaps[:n + 1]) for n in range(len(gaps))]
    log = limited_log(times, other_types=min(others, len(times)))
    split_at = data.draw(st.integers(0, len(log)))
    with tempfile.TemporaryDirectory() as tmp:
        assert folded(log, Path(tmp) / "whole") == folded_in_two(log, Path(tmp) / "two", split_at)
