"""The time router and schedules on a real broker: due jobs start on time, far ones stay on disk, failover, cron."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.contract.ids import occurrence_job_id
from engine.questions.lateness import percentile
from engine.questions.stores import find_job
from engine.questions.schedules import due_entry, find_schedule
from projections.store import view_store_path
from tests.integration.conftest import events_by_job, eventually, start_engine, verify_partition
from tests.integration.helpers.ports import free_port

SECOND = 1_000_000
FINAL = ("JobSucceeded", "JobDeadLettered", "JobCancelled")


def now_us() -> int:
    return time.time_ns() // 1000


def cli(settings: Settings, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = ["--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace,
             "--state-dir", str(state_dir)]
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *args, *flags], capture_output=True, text=True)


def started(events: list) -> list:  # type: ignore[type-arg]
    return [e.event for e in events if not e.fenced and e.event.type == "JobStarted"]


def terminals(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.event.type for e in events if not e.fenced and e.event.type in FINAL]


def views_ready(state: Settings) -> Settings:
    """``state`` once the engine's view has created its three stores: one read while it creates them fails."""
    eventually(lambda: all((view_store_path(state.state_dir, state.namespace, p) / "CURRENT").exists()
                           for p in range(3)), 30, "the view's stores")
    return state


def test_ten_thousand_jobs_due_over_ten_seconds_start_on_time(settings: Settings, client: Client, engines,  # type: ignore[no-untyped-def]
                                                               tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--concurrency", "32"))
    engine.wait_active(3)
    first_due = now_us() + 6 * SECOND
    jobs = [{"task_type": "noop", "payload": {}, "tenant": f"t{i % 5}", "run_at": (first_due + i * 1000) / SECOND}
            for i in range(10_000)]
    ids = {h.job_id for chunk in range(0, 10_000, 2000) for h in client.submit_many(jobs[chunk:chunk + 2000])}
    assert now_us() < first_due, "submitting took too long for the test to mean anything"

    by_job: dict[str, list] = {}  # type: ignore[type-arg]

    def all_done() -> bool:
        by_job.clear()
        by_job.update((j, e) for j, e in events_by_job(settings).items() if j in ids)
        return len(by_job) == 10_000 and all(terminals(e) for e in by_job.values())

    eventually(all_done, 60, "10,000 jobs to finish")
    starts = [s for events in by_job.values() for s in started(events)]
    assert len(starts) == 10_000 and {s.job_id for s in starts} == ids
    early = [s for s in starts if s.occurred_at < s.body.due_at]
    assert early == [], f"{len(early)} started before their due time"
    late = sorted(s.occurred_at - s.body.due_at for s in starts)
    print(f"\nlateness of 10,000 jobs due over 10 s: p50 {percentile(late, 50) / 1000:.1f} ms, "
          f"p99 {percentile(late, 99) / 1000:.1f} ms, p99.9 {percentile(late, 99.9) / 1000:.1f} ms, "
          f"max {late[-1] / 1000:.1f} ms")
    report = cli(settings, engine.state_dir, "lateness", "--task-type", "noop", "--json")
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)
    assert row["count"] == 10_000 and row["p50_ms"] == percentile(late, 50) / 1000
    assert row["p99.9_ms"] >= row["p99_ms"] >= row["p95_ms"] >= row["p50_ms"] >= 0


def scrape_hot(port: int) -> dict[tuple[str, str], float]:
    """(partition, kind) -> timers held in memory, from the engine's metrics endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.findall(r'^epochq_timers_hot\{kind="(\w+)",partition="(\d+)"\} (\S+)$', text, re.M)
    return {(partition, kind): float(value) for kind, partition, value in found}


def test_a_job_a_day_ahead_is_on_disk_not_in_memory(settings: Settings, client: Client, engines,  # type: ignore[no-untyped-def]
                                                    tmp_path: Path) -> None:
    port = free_port()
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--metrics-port", str(port)))
    engine.wait_active(3)
    tomorrow = client.submit("echo", {}, tenant="acme", delay=86_400)
    soon = client.submit("echo", {}, tenant="acme", delay=30)
    state = views_ready(engine.settings(settings))
    eventually(lambda: due_entry(state, tomorrow.job_id) is not None and due_entry(state, soon.job_id) is not None,
               20, "both jobs in the due index")

    def held() -> dict[str, float]:
        hot = scrape_hot(port)
        return {p: n for (p, kind), n in hot.items() if kind == "job"}

    eventually(lambda: sum(held().values()) == 1, 10, "the job due in 30 s to be held in memory")
    assert held().get(str(tomorrow.partition), 0) == (1 if tomorrow.partition == soon.partition else 0)
    assert client.status(tomorrow.job_id).status == "scheduled"


def test_kill_minus_nine_while_jobs_come_due_loses_none_and_runs_none_twice(settings: Settings, client: Client,  # type: ignore[no-untyped-def]
                                                                           engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path)
    b.wait_active(1)
    due = now_us() + 3 * SECOND
    handles = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": "acme",
                                   "run_at": (due + i * 40_000) / SECOND} for i in range(300)])  # over 12 s
    ids = {h.job_id for h in handles}
    eventually(lambda: sum(1 for j, e in events_by_job(settings).items() if j in ids and started(e)) >= 25, 30,
               "the first jobs come due and started")
    a.signal(signal.SIGKILL)  # a owns two partitions while their jobs keep coming due

    by_job: dict[str, list] = {}  # type: ignore[type-arg]

    def all_done() -> bool:
        by_job.clear()
        by_job.update((j, e) for j, e in events_by_job(settings).items() if j in ids)
        return len(by_job) == 300 and all(terminals(e) for e in by_job.values())

    eventually(all_done, 50, "every job to finish after the takeover")
    assert len(by_job) == 300 and all(terminals(e) == ["JobSucceeded"] for e in by_job.values())
    starts = [s for e in by_job.values() for s in started(e)]
    early = [(s.job_id, s.owner, s.epoch, s.body.attempt, s.occurred_at - s.body.due_at) for s in starts
             if s.occurred_at < s.body.due_at]
    assert len(starts) >= 300 and early == [], early
    taken = [e for e in by_job.values() if started(e)[-1].owner == "b" and started(e)[-1].body.due_at < now_us()]
    assert taken, "b ran none of the jobs that came due"
    assert "overdue sweep fired" in b.logs()
    survivor = b.settings(settings)
    eventually(lambda: all((found := find_job(survivor, h.job_id)) is not None and found[1].state.value == "completed"
                           for h in handles), 30, "b's view to fold every end")


def test_cancel_and_reschedule_before_due(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    state = views_ready(engine.settings(settings))
    cancelled = client.submit("echo", {}, tenant="acme", delay=3)
    later = client.submit("echo", {}, tenant="acme", delay=3600)
    pushed_back = client.submit("echo", {}, tenant="acme", delay=30)
    eventually(lambda: all(due_entry(state, h.job_id) for h in (cancelled, later, pushed_back)), 20, "three timers")
    assert client.cancel(cancelled.job_id, tenant="acme", reason="not needed").wait(10).status == "cancelled"
    eventually(lambda: due_entry(state, cancelled.job_id) is None, 10, "the view to fold the cancel")
    receipt = client.reschedule(later.job_id, delay=1.5, tenant="acme", reason="sooner")
    assert receipt.accepted and receipt.armed is not None
    moved = later.wait(20)
    assert moved.status == "completed"
    start = next(e.event for e in moved.events if e.event.type == "JobStarted")
    assert start.body.due_at == receipt.armed and start.occurred_at >= receipt.armed
    pushed = cli(settings, engine.state_dir, "reschedule", pushed_back.job_id, "--delay", "3600", "--tenant", "acme")
    assert pushed.returncode == 0 and "rescheduled to" in pushed.stdout, pushed.stdout + pushed.stderr
    eventually(lambda: (due_entry(state, pushed_back.job_id) or b"") > b"d:%020d" % (now_us() + 3000 * SECOND), 10,
               "the due index to follow the reschedule")
    assert client.status(pushed_back.job_id).status == "scheduled"
    again = client.reschedule(cancelled.job_id, delay=1, tenant="acme")
    assert again.status == "refused" and "cancelled" in again.reason
    assert client.status(cancelled.job_id).status == "cancelled"


def test_a_cron_schedule_every_second_survives_failover_without_a_double_occurrence(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    a = start_engine(engines, settings, "a", tmp_path)
    a.wait_active(3)
    b = start_engine(engines, settings, "b", tmp_path)
    b.wait_active(1)
    receipt = client.add_schedule("tick", "noop", "* * * * * *", tenant="acme")
    assert receipt.accepted and receipt.armed is not None
    created = now_us()
    eventually(lambda: len(_fired(settings)) >= 5, 30, "five occurrences before the failover")
    for engine in (a, b):  # kill whichever owns the schedule's partition
        if engine.proc.poll() is None and re.search(r"partition \d+: active", engine.logs()):
            found = find_schedule(engine.settings(settings), "tick")
            if found is not None and found[0] in engine.owned():
                engine.signal(signal.SIGKILL)
                killed = engine
                break
    else:
        raise AssertionError("no engine owns the schedule")
    survivor = b if killed is a else a
    killed_at = now_us()
    eventually(lambda: survivor.owned() == {0, 1, 2}, 40, "the survivor to own every partition")
    eventually(lambda: len([f for f in _fired(settings) if f.occurrence_at > killed_at + 1 * SECOND]) >= 3, 30,
               "three occurrences after the failover")
    assert survivor.proc.poll() is None
    assert cli(settings, survivor.state_dir, "schedules", "pause", "tick").returncode == 0
    eventually(lambda: (found := find_schedule(survivor.settings(settings), "tick")) is not None
               and not found[1].enabled, 20, "the survivor's view to fold the pause")

    fired = _fired(settings)  # the pause is folded: no occurrence fires after these
    assert len({f.occurrence_at for f in fired}) == len(fired), "an occurrence fired twice"
    assert [f.job_id for f in fired] == [occurrence_job_id("tick", f.occurrence_at) for f in fired]
    occurrences: dict[int, list[str]] = {}

    def every_occurrence_ran_once() -> dict[str, list]:  # type: ignore[type-arg]
        runs = events_by_job(settings)
        occurrences.update((f.occurrence_at, terminals(runs.get(f.job_id, []))) for f in fired)
        assert all(t == ["JobSucceeded"] for t in occurrences.values()), occurrences
        return runs

    runs = eventually(every_occurrence_ran_once, 30, "every occurrence's job to end")
    before = [o for o in occurrences if o < killed_at]
    after = [o for o in occurrences if o > killed_at + 1 * SECOND]
    assert len(before) >= 4 and len(after) >= 3, (len(before), len(after))
    seconds = (killed_at - created) // SECOND - 1
    assert len(before) >= seconds / 2, f"{len(before)} occurrences in {seconds} s before the failover"
    late = [min(s.occurred_at for s in started(runs[occurrence_job_id("tick", o)])) - o
            for o in occurrences if started(runs.get(occurrence_job_id("tick", o), []))]
    print(f"\nschedule every second: {len(occurrences)} occurrences, {len(before)} before the kill, "
          f"{len(after)} after; start lateness p50 {percentile(sorted(late), 50) / 1000:.0f} ms")


def _fired(settings: Settings) -> list:  # type: ignore[type-arg]
    """Every ScheduleFired of the namespace that is not fenced."""
    return [e.event.body for events in events_by_job(settings).values() for e in events
            if not e.fenced and e.event.type == "ScheduleFired"]


def test_pause_resume_and_remove_a_schedule(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    state = views_ready(engine.settings(settings))
    client = Client(state)  # reads the engine's projections
    added = cli(settings, engine.state_dir, "schedules", "add", "pulse", "--task", "noop", "--cron", "* * * * * *",
                "--tenant", "acme", "--tz", "Europe/Berlin")
    assert added.returncode == 0 and "next occurrence" in added.stdout, added.stdout + added.stderr
    eventually(lambda: (find_schedule(state, "pulse") or (0, None))[1] is not None
               and find_schedule(state, "pulse")[1].fired_count >= 3, 15, "three occurrences")  # type: ignore[index]
    assert client.pause_schedule("pulse", reason="maintenance").accepted
    # once the view folds the pause, it has folded every occurrence fired before it (the log's order)
    paused = eventually(lambda: (view := client.schedule("pulse")) is not None and not view.enabled and view, 10,
                        "the view to fold the pause")
    time.sleep(2)  # on purpose: two occurrences of the every-second schedule come and go while it is paused
    still = client.schedule("pulse")
    assert still is not None and still.fired_count == paused.fired_count, "a paused schedule fired"
    resumed_at = now_us()
    assert client.resume_schedule("pulse").accepted
    eventually(lambda: client.schedule("pulse").fired_count >= paused.fired_count + 2, 10, "firing again")  # type: ignore[union-attr]
    view = client.schedule("pulse")
    assert view is not None and view.enabled and view.skipped_count == 0
    shown = cli(settings, engine.state_dir, "schedules", "show", "pulse", "--json")
    row = json.loads(shown.stdout)
    assert row["enabled"] and row["timezone"] == "Europe/Berlin" and len(row["next"]) == 5
    listing = cli(settings, engine.state_dir, "schedules", "list")
    assert "pulse" in listing.stdout and "1 schedule(s)" in listing.stdout
    fired = [e.event.body for events in events_by_job(settings).values() for e in events
             if e.event.type == "ScheduleFired"]
    gap = [f for f in fired if paused.last_finished < f.occurrence_at < resumed_at]  # type: ignore[operator]
    assert len(gap) <= 1, f"fired while paused: {gap}"  # at most the run that was in flight at the pause
    assert client.remove_schedule("pulse").accepted
    eventually(lambda: client.schedule("pulse") is None, 10, "the view to fold the removal")
    assert cli(settings, engine.state_dir, "schedules", "remove", "pulse").returncode == 1
    client.close()
    assert engine.stop() == 0
    for p in range(3):  # schedule records, timers and occurrence notes rebuild byte for byte
        result = verify_partition(state, p)
        assert result.matches, result
