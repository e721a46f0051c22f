"""Recurring schedules and the time router's engine side.

Decide/evolve, the schedules view, timelines, reports, pings.
"""

from __future__ import annotations

import tempfile
from array import array
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.contract import messages as m
from engine.contract.ids import occurrence_job_id
from engine.domain.decide import CommandInput, Emit, Send
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from engine.domain.schedules import (
    ScheduleContext, ScheduleDue, ScheduleView, decide_schedule, envelope_id, evolve_schedule, occurrence_of,
)
from engine.domain.timerouter import SECOND, Windows
from engine.questions.lateness import percentile, summarize
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.schedules import FIRST_PING_US, ScheduleDesk
from engine.runtime.loop.timers import PartitionTimers, Timeline, scan_due
from projections.batch import Batch
from projections.evolve import APPLIED, Folded, fold
from projections.store import ProjectionStore, open_store
from projections.views import keys as k
from projections.views.jobs import read_job
from projections.views.schedules import (
    SCHEDULE_DUE, fold_schedule, read_occurrence, read_schedule, schedule_due_key,
)
from tests.unit.factories import claim, command, event

SID = "every-minute"
ENV = envelope_id(SID)
MINUTE = 60 * SECOND
T0 = int(datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC).timestamp()) * SECOND  # half a minute past noon
NOON_01 = T0 + 30 * SECOND  # the next minute boundary


def utc(*parts: int) -> int:
    return int(datetime(*parts, tzinfo=UTC).timestamp()) * SECOND


def upsert(cron: str = "* * * * *", **kwargs: Any) -> m.UpsertSchedule:
    fields: dict[str, Any] = dict(schedule_id=SID, tenant_id="acme", task_type="report.build", cron=cron,
                                  payload=m.Payload(b'{"k":1}'))
    fields.update(kwargs)
    return m.UpsertSchedule(**fields)


class Run:
    """A schedule driven through decide and evolve, as the engine would, with every output kept."""

    def __init__(self) -> None:
        self.view: ScheduleView | None = None
        self.events: list[m.Event] = []
        self.sent: list[m.Command] = []

    def __call__(self, given: Any, now: int, tasks: Any = None) -> list[Emit | Send]:
        if isinstance(given, m.CommandBody.__args__):  # type: ignore[attr-defined]
            given = CommandInput(command(ENV, given), len(self.events))
        outs = decide_schedule(self.view, given, ScheduleContext(now, tasks))
        for out in outs:
            if isinstance(out, Send):
                self.sent.append(out.command)
                continue
            ev = event(out.body, out.job_id, at=now)
            self.events.append(ev)
            self.view = evolve_schedule(self.view, ev)
        return outs

    def types(self, outs: list[Emit | Send]) -> list[str]:
        return [type(o.body).__name__ if isinstance(o, Emit) else "Send" for o in outs]

    def fire(self, now: int) -> int:
        """Fire the armed occurrence at ``now`` and report its run finished at once; the occurrence."""
        outs = self(ScheduleDue(SID), now)
        fired = next(o.body for o in outs if isinstance(o, Emit) and isinstance(o.body, m.ScheduleFired))
        self(m.ReportOccurrence(SID, fired.occurrence_at, fired.job_id, "completed"), now)
        return fired.occurrence_at


# --- upsert ------------------------------------------------------------------------------


def test_upsert_records_the_definition_and_arms_the_next_occurrence_once() -> None:
    run = Run()
    outs = run(upsert(), T0)
    assert run.types(outs) == ["ScheduleUpserted", "ScheduleArmed"]
    assert all(o.job_id == ENV and o.tenant_id == "acme" for o in outs if isinstance(o, Emit))
    assert run.view is not None and run.view.armed == NOON_01 and run.view.enabled and run.view.owed_from == T0


def test_a_paused_upsert_arms_nothing() -> None:
    run = Run()
    assert run.types(run(upsert(enabled=False), T0)) == ["ScheduleUpserted"]
    assert run.view is not None and run.view.armed is None and not run.view.enabled


def test_re_adding_a_paused_schedule_changes_it_and_leaves_it_paused() -> None:
    run = Run()
    run(upsert(), T0)
    run(m.PauseSchedule(SID, "maintenance"), T0 + 1)
    outs = run(upsert(cron="*/5 * * * *"), T0 + 2)
    assert run.types(outs) == ["ScheduleUpserted"]
    assert run.view is not None and not run.view.enabled and run.view.armed is None
    assert run.view.cron == "*/5 * * * *"
    outs = run(m.ResumeSchedule(SID), T0 + 3)
    assert "ScheduleArmed" in run.types(outs) and run.view.enabled


@pytest.mark.parametrize(("change", "named"), [
    ({"cron": "61 * * * *"}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"misfire_policy": "sometimes"}, "misfire_policy"),
    ({"dst_policy": "never"}, "dst_policy"),
    ({"task_type": "unknown.task"}, "task_type"),
])
def test_a_bad_upsert_is_refused_naming_the_field(change: dict[str, Any], named: str) -> None:
    run = Run()
    outs = run(upsert(**change), T0, tasks={"report.build": object()})
    assert run.types(outs) == ["CommandRefused"]
    assert outs[0].body.reason.startswith(named), outs[0].body  # type: ignore[union-attr]
    assert run.view is None


def test_a_schedule_command_under_another_envelope_is_refused() -> None:
    outs = decide_schedule(None, CommandInput(command("schedule:other", upsert()), 0), ScheduleContext(T0))
    assert [type(o.body).__name__ for o in outs] == ["CommandRefused"]  # type: ignore[union-attr]
    assert "schedule:every-minute" in outs[0].body.reason  # type: ignore[union-attr]


# --- firing and reporting ----------------------------------------------------------------


def test_the_due_occurrence_fires_its_derived_job_and_nothing_fires_twice() -> None:
    run = Run()
    run(upsert(), T0)
    assert run(ScheduleDue(SID), NOON_01 - 1) == []
    outs = run(ScheduleDue(SID), NOON_01 + 5_000)
    assert run.types(outs) == ["ScheduleFired", "Send"]
    job_id = occurrence_job_id(SID, NOON_01)
    submit = run.sent[0]
    assert submit.job_id == job_id and submit.tenant_id == "acme"
    assert isinstance(submit.body, m.SubmitJob) and submit.body.run_at == NOON_01
    assert submit.body.labels == {"schedule": SID, "occurrence": str(NOON_01)}
    assert occurrence_of(submit.body.labels) == (SID, NOON_01)
    assert run.view is not None and run.view.fired == NOON_01 and run.view.armed is None
    assert run(ScheduleDue(SID), NOON_01 + 90 * SECOND) == []  # in flight: the next waits for its end


def test_a_report_arms_the_next_occurrence_and_a_repeated_report_changes_nothing() -> None:
    run = Run()
    run(upsert(), T0)
    run(ScheduleDue(SID), NOON_01)
    report = m.ReportOccurrence(SID, NOON_01, occurrence_job_id(SID, NOON_01), "completed")
    assert run.types(run(report, NOON_01 + 2 * SECOND)) == ["ScheduleArmed"]
    assert run.view is not None and run.view.armed == NOON_01 + MINUTE
    assert run.view.fired is None and run.view.last_finished == NOON_01
    assert run.view.last_job_id == occurrence_job_id(SID, NOON_01)
    assert run(report, NOON_01 + 3 * SECOND) == []


def test_a_run_longer_than_the_period_skips_what_it_overlapped_by_default() -> None:
    run = Run()
    run(upsert(), T0)
    run(ScheduleDue(SID), NOON_01)
    report = m.ReportOccurrence(SID, NOON_01, occurrence_job_id(SID, NOON_01), "dead")
    run(report, NOON_01 + 150 * SECOND)  # 2.5 minutes: 12:02 and 12:03 passed, 12:03 is within the grace
    assert run.view is not None and run.view.armed == NOON_01 + 2 * MINUTE


# --- misfires ----------------------------------------------------------------------------


def test_skip_beyond_the_grace_records_the_skip_and_arms_the_next() -> None:
    run = Run()
    run(upsert(), T0)
    outs = run(ScheduleDue(SID), NOON_01 + 10 * MINUTE + 30 * SECOND)  # down for ten minutes
    assert run.types(outs) == ["OccurrenceSkipped", "ScheduleFired", "Send"]  # 12:11 is 30 s late: within grace
    assert outs[1].body.occurrence_at == NOON_01 + 10 * MINUTE  # type: ignore[union-attr]
    run = Run()
    run(upsert(cron="0 * * * *"), T0)
    armed = run.view.armed  # type: ignore[union-attr]
    outs = run(ScheduleDue(SID), armed + 10 * MINUTE)  # hourly, ten minutes late: beyond the 60 s grace
    assert run.types(outs) == ["OccurrenceSkipped", "ScheduleArmed"]
    assert "misfire (skip)" in outs[0].body.reason  # type: ignore[union-attr]
    assert run.view is not None and run.view.armed == armed + 60 * MINUTE and run.view.skipped_count == 1


def test_run_once_fires_the_latest_missed_occurrence_however_old() -> None:
    run = Run()
    run(upsert(cron="0 * * * *", misfire_policy="run_once"), T0)
    armed = run.view.armed  # type: ignore[union-attr]
    outs = run(ScheduleDue(SID), armed + 5 * 60 * MINUTE + 10 * MINUTE)
    assert run.types(outs) == ["OccurrenceSkipped", "ScheduleFired", "Send"]
    assert outs[1].body.occurrence_at == armed + 5 * 60 * MINUTE  # type: ignore[union-attr]


def test_catch_up_fires_the_most_recent_missed_ones_one_after_another_within_the_cap() -> None:
    run = Run()
    run(upsert(misfire_policy="catch_up", max_catch_up=3), T0)
    now = NOON_01 + 5 * MINUTE + 10 * SECOND  # 12:01 … 12:06 missed: six, cap three
    fired = [run.fire(now), run.fire(now + 1), run.fire(now + 2)]
    assert fired == [NOON_01 + 3 * MINUTE, NOON_01 + 4 * MINUTE, NOON_01 + 5 * MINUTE]
    assert [e.type for e in run.events].count("OccurrenceSkipped") == 1
    assert run.view is not None and run.view.armed == NOON_01 + 6 * MINUTE  # caught up: next is in the future
    assert len({c.job_id for c in run.sent}) == 3


# --- pause, resume, remove ---------------------------------------------------------------


def test_a_paused_schedule_never_fires_and_resumes_from_now_without_catching_up() -> None:
    run = Run()
    run(upsert(misfire_policy="catch_up"), T0)
    assert run.types(run(m.PauseSchedule(SID, "maintenance"), T0 + 1)) == ["SchedulePaused"]
    assert run.types(run(m.PauseSchedule(SID), T0 + 2)) == ["CommandRefused"]
    assert run(ScheduleDue(SID), NOON_01 + 10 * MINUTE) == []
    resumed_at = NOON_01 + 10 * MINUTE + 15 * SECOND
    assert run.types(run(m.ResumeSchedule(SID), resumed_at)) == ["ScheduleResumed", "ScheduleArmed"]
    assert run.view is not None and run.view.armed == NOON_01 + 11 * MINUTE  # nothing owed for the pause
    assert run.fire(NOON_01 + 11 * MINUTE) == NOON_01 + 11 * MINUTE
    assert run.types(run(m.ResumeSchedule(SID), resumed_at)) == ["CommandRefused"]


def test_a_run_ending_while_paused_closes_it_and_resume_rearms() -> None:
    run = Run()
    run(upsert(), T0)
    run(ScheduleDue(SID), NOON_01)
    run(m.PauseSchedule(SID), NOON_01 + 1)
    run(m.ReportOccurrence(SID, NOON_01, occurrence_job_id(SID, NOON_01), "completed"), NOON_01 + 5 * MINUTE)
    assert run.view is not None and run.view.fired is None and run.view.last_finished == NOON_01
    assert run(ScheduleDue(SID), NOON_01 + 6 * MINUTE) == []  # still paused
    run(m.ResumeSchedule(SID), NOON_01 + 7 * MINUTE + 1)
    assert run.view.armed == NOON_01 + 8 * MINUTE


def test_resuming_with_a_run_in_flight_waits_for_its_end() -> None:
    run = Run()
    run(upsert(), T0)
    run(ScheduleDue(SID), NOON_01)
    run(m.PauseSchedule(SID), NOON_01 + 1)
    assert run.types(run(m.ResumeSchedule(SID), NOON_01 + 2)) == ["ScheduleResumed"]
    run(m.ReportOccurrence(SID, NOON_01, occurrence_job_id(SID, NOON_01), "completed"), NOON_01 + 3)
    assert run.view is not None and run.view.armed == NOON_01 + MINUTE


def test_removed_schedules_forget_everything_and_refuse_late_reports() -> None:
    run = Run()
    run(upsert(), T0)
    run(ScheduleDue(SID), NOON_01)
    assert run.types(run(m.RemoveSchedule(SID, "obsolete"), NOON_01 + 1)) == ["ScheduleRemoved"]
    assert run.view is None
    late = run(m.ReportOccurrence(SID, NOON_01, occurrence_job_id(SID, NOON_01), "completed"), NOON_01 + 2)
    assert run.types(late) == ["CommandRefused"]
    assert run(ScheduleDue(SID), NOON_01 + MINUTE) == []
    assert run.types(run(m.RemoveSchedule(SID), NOON_01 + 3)) == ["CommandRefused"]


# --- DST through the engine's decisions ---------------------------------------------------


@pytest.mark.parametrize(("zone", "start", "policy", "expected"), [
    # New York, spring forward 2026-03-08: 02:30 does not exist
    ("America/New_York", utc(2026, 3, 7, 12), "first", [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]),
    ("America/New_York", utc(2026, 3, 7, 12), "skip", [utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)]),
    # Berlin, fall back 2026-10-25: 02:30 happens twice (CEST, then CET)
    ("Europe/Berlin", utc(2026, 10, 24, 12), "both",
     [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)]),
    ("Europe/Berlin", utc(2026, 10, 24, 12), "first", [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
    ("Europe/Berlin", utc(2026, 10, 24, 12), "skip", [utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]),
])
def test_daily_runs_across_dst_follow_the_policy(zone: str, start: int, policy: str, expected: list[int]) -> None:
    run = Run()
    run(upsert(cron="30 2 * * *", timezone=zone, dst_policy=policy), start)
    fired = [run.fire(run.view.armed) for _ in expected]  # type: ignore[union-attr]
    assert fired == expected
    assert len({c.job_id for c in run.sent}) == len(expected)


# --- the schedules view ------------------------------------------------------------------


@pytest.fixture
def store() -> Iterator[ProjectionStore]:
    with tempfile.TemporaryDirectory() as tmp:
        s = open_store(Path(tmp) / "p0000")
        yield s
        s.close()


def fold_all(store: ProjectionStore, events: list[m.Event]) -> None:
    batch = Batch(store)
    for offset, ev in enumerate(events):
        fold(batch, ev, offset)
    batch.commit()


def history(run: Run) -> list[m.Event]:
    return [claim(1), *run.events]


def test_the_view_keeps_one_timer_for_an_enabled_armed_schedule(store: ProjectionStore) -> None:
    run = Run()
    run(upsert(), T0)
    fold_all(store, history(run))
    assert read_schedule(store, SID) == run.view
    assert [key for key, _ in store.scan(SCHEDULE_DUE)] == [schedule_due_key(NOON_01, SID)]
    run.events.clear()
    run(m.PauseSchedule(SID), T0 + 1)
    batch = Batch(store)
    fold(batch, run.events[0], 10)
    batch.commit()
    assert list(store.scan(SCHEDULE_DUE)) == [] and read_schedule(store, SID) == run.view


def test_a_rebuild_of_schedule_events_is_byte_identical(store: ProjectionStore) -> None:
    run = Run()
    run(upsert(misfire_policy="catch_up"), T0)
    for n in range(3):
        run.fire(NOON_01 + n * MINUTE)
    run(m.PauseSchedule(SID), NOON_01 + 5 * MINUTE)
    fold_all(store, history(run))
    with tempfile.TemporaryDirectory() as tmp:
        again = open_store(Path(tmp) / "p")
        fold_all(again, history(run))
        assert list(again.items()) == list(store.items())
        again.close()


def test_an_occurrence_job_is_folded_as_a_job_and_noted_for_its_report(store: ProjectionStore) -> None:
    labels = {"schedule": SID, "occurrence": str(NOON_01)}
    job_id = occurrence_job_id(SID, NOON_01)
    submitted = m.JobSubmitted("report.build", m.Payload(b"{}"), 5, "NORMAL", 3, run_at=NOON_01, labels=labels)
    fold_all(store, [claim(1), event(submitted, job_id), event(m.JobQueued("submitted"), job_id)])
    assert read_occurrence(store, job_id) == (SID, NOON_01)
    job = read_job(store, job_id)
    assert job is not None and job.state is JobState.QUEUED
    plain = m.JobSubmitted("report.build", m.Payload(b"{}"), 5, "NORMAL", 3)
    fold_all(store, [event(plain, "plain-job")])
    assert read_occurrence(store, "plain-job") is None


def test_fold_schedule_ignores_other_events() -> None:
    batch = SimpleNamespace(put=None, get=None)
    assert fold_schedule(batch, event(m.JobQueued("due"))) is False


# --- timelines: the disk index and the hot set --------------------------------------------


def job_at(store: ProjectionStore, due: int, job_id: str) -> None:
    store.commit({k.due_key(due, job_id): job_id.encode()}, 0)


def test_scan_due_reads_exactly_the_slice(store: ProjectionStore) -> None:
    for due, jid in ((10, "a"), (20, "b"), (20, "c"), (30, "d")):
        job_at(store, due, jid)
    from engine.domain.timerouter import DueRange
    assert scan_due(store, k.DUE, DueRange(10, 20)) == [(20, "b"), (20, "c")]
    assert scan_due(store, k.DUE, DueRange(-1, 10)) == [(10, "a")]
    assert scan_due(store, k.DUE, DueRange(30, 99)) == []


def test_promotion_holds_the_horizon_and_leaves_tomorrow_on_disk(store: ProjectionStore) -> None:
    now = 1_000 * SECOND
    job_at(store, now + 5 * SECOND, "soon")
    job_at(store, now + 86_400 * SECOND, "tomorrow")
    line = Timeline(k.DUE, Windows())
    assert line.promote(store, now) and "soon" in line.hot and "tomorrow" not in line.hot
    assert not line.promote(store, now + SECOND // 2)  # not yet a sweep interval later
    assert line.hot.pop_due(now + 5 * SECOND, 10) == ["soon"]


def test_the_overdue_sweep_streams_in_batches_and_resumes_where_it_stopped(store: ProjectionStore) -> None:
    now = 1_000 * SECOND
    for n in range(5):
        job_at(store, n + 1, f"old-{n}")
    job_at(store, now, "current")  # within the last sweep interval: the hot set's, not the sweep's
    line = Timeline(k.DUE, Windows())
    line.promote(store, now)
    assert line.overdue(store, now, limit=2) == ["old-0", "old-1"] and line.sweeping
    assert line.overdue(store, now, limit=2) == ["old-2", "old-3"]
    assert line.overdue(store, now, limit=2) == ["old-4"] and not line.sweeping
    assert line.overdue(store, now + SECOND, limit=2) == []  # next one only after the interval
    assert line.overdue(store, now + 31 * SECOND, limit=10) == [f"old-{n}" for n in range(5)] + ["current"]


def fake_owner(store: ProjectionStore, epoch: int = 1) -> Any:
    """What the timers and the schedule desk use of a partition's draft."""
    staged = Staged()
    return SimpleNamespace(store=store, batch=Batch(store), epoch=epoch, staged=staged, number=0,
                           send=staged.commands.append)


def job(state: JobState, due: int | None = None, job_id: str = "job-1") -> JobView:
    return JobView(job_id, "acme", "report.build", state, 5, "NORMAL", 3, m.Payload(b"{}"), 0, 0, 1, due_at=due)


def test_the_hot_set_follows_the_fold(store: ProjectionStore) -> None:
    now = 1_000 * SECOND
    timers = PartitionTimers(fake_owner(store), Windows(), BreakerBoard({}))
    timers.jobs.promote(store, now)
    ev = event(m.JobScheduled(now + 5 * SECOND))
    timers.observe(ev, Folded(APPLIED, job(JobState.PENDING), job(JobState.SCHEDULED, now + 5 * SECOND)))
    assert timers.jobs.hot.due_of("job-1") == now + 5 * SECOND
    moved = job(JobState.SCHEDULED, now + 3_600 * SECOND)
    timers.observe(event(m.JobRescheduled(now + 3_600 * SECOND)), Folded(APPLIED, job(JobState.SCHEDULED), moved))
    assert "job-1" not in timers.jobs.hot  # rescheduled beyond the horizon: back on disk only
    timers.observe(ev, Folded(APPLIED, job(JobState.PENDING), job(JobState.SCHEDULED, now + 7 * SECOND)))
    timers.observe(event(m.JobCancelled()), Folded(APPLIED, job(JobState.SCHEDULED), job(JobState.CANCELLED)))
    assert len(timers.jobs.hot) == 0
    assert timers.held() == (0, 0)


# --- reports and pings -------------------------------------------------------------------


def test_an_ended_occurrence_job_reports_to_its_schedule(store: ProjectionStore) -> None:
    job_id = occurrence_job_id(SID, NOON_01)
    store.commit({b"o:" + job_id.encode(): __import__("marshal").dumps((SID, NOON_01), 2)}, 0)
    owner = fake_owner(store)
    desk = ScheduleDesk(owner, PartitionTimers(owner, Windows(), BreakerBoard({})).schedules.hot)
    running, done = job(JobState.RUNNING, job_id=job_id), job(JobState.COMPLETED, job_id=job_id)
    desk.observe(event(m.JobStarted(1, NOON_01), job_id), Folded(APPLIED, job(JobState.QUEUED, job_id=job_id), running))
    assert owner.staged.commands == []
    desk.observe(event(m.JobSucceeded(1, 10), job_id), Folded(APPLIED, running, done))
    report = owner.staged.commands[-1]
    assert report.job_id == ENV and report.body == m.ReportOccurrence(SID, NOON_01, job_id, "completed")
    refused = event(m.CommandRefused("SubmitJob", "completed", "a job with this id already exists"), job_id)
    desk.observe(refused, Folded(APPLIED, done, done))  # a ping after the end: report again
    assert len(owner.staged.commands) == 2
    stale = event(m.JobSucceeded(1, 10), job_id, epoch=0)  # an older epoch's write: its owner reported
    desk.observe(stale, Folded(APPLIED, running, done))
    assert len(owner.staged.commands) == 2


def test_an_unreported_occurrence_is_pinged_with_backoff(store: ProjectionStore) -> None:
    run = Run()
    run(upsert(), T0)
    run(ScheduleDue(SID), NOON_01)
    fold_all(store, history(run))
    owner = fake_owner(store)
    desk = ScheduleDesk(owner, PartitionTimers(owner, Windows(), BreakerBoard({})).schedules.hot)
    desk.load(NOON_01)
    assert desk.ping(NOON_01 + FIRST_PING_US - 1) == 0
    assert desk.ping(NOON_01 + FIRST_PING_US) == 1
    ping = owner.staged.commands[0]
    assert ping.job_id == occurrence_job_id(SID, NOON_01) and ping.command_id.endswith(":ping1")
    assert desk.ping(NOON_01 + FIRST_PING_US + 2 * FIRST_PING_US - 1) == 0  # the delay doubled
    assert desk.ping(NOON_01 + 3 * FIRST_PING_US) == 1
    armed = event(m.ScheduleArmed(SID, NOON_01 + MINUTE), ENV)
    desk.observe(armed, Folded(APPLIED))
    assert desk.pings == {} and desk.hot.due_of(SID) is None  # beyond the (unpromoted) horizon


# --- lateness ----------------------------------------------------------------------------


def test_percentiles_are_nearest_rank_observed_values() -> None:
    values = list(range(1, 1001))
    assert [percentile(values, q) for q in (50, 95, 99, 99.9, 100)] == [500, 950, 990, 999, 1000]
    assert percentile([7], 99.9) == 7
    figures = summarize("x", array("q", [30, 10, 20]))
    assert figures.count == 3 and figures.quantiles[50.0] == 20 and figures.max_us == 30
    assert figures.as_json()["p99.9_ms"] == 0.03
