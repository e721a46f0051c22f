"""Cancelling jobs on a real broker: waiting ones at once, running ones cooperatively, then by the grace."""

from __future__ import annotations

import json
from pathlib import Path

from engine.client import Client, JobHandle
from engine.config import Settings
from engine.contract import messages as m
from engine.errors import NotFoundError
from engine.questions.waiting import decided
from tests.integration.conftest import start_engine, status_is
from tests.integration.helpers.cli import epochq
from tests.integration.helpers.raw import partition_events


def running(handle: JobHandle) -> None:
    assert handle.wait(30, until=lambda o: o.status == "running").status == "running"


def types(client: Client, job_id: str) -> list[str]:
    return [e.event.type for e in client.status(job_id).events]


def queued(client: Client, held: list[JobHandle]) -> set[str]:
    """The held jobs' statuses once each is queued (or 30 s have passed)."""
    return {o.status for o in client.wait_all(held, 30, until=status_is("queued"))}


def started_only_after_the_resume(settings: Settings, held: list[JobHandle], task_type: str) -> None:
    """In each held job's partition, every start of a held job comes after the newest resume of ``task_type``: the
    log's order proves that none started while the task type was paused, however long that was."""
    ids = {h.job_id for h in held}
    for p in sorted({h.partition for h in held}):
        events = partition_events(settings, p)
        resumed = [i for i, e in enumerate(events) if isinstance(e.body, m.TaskTypeResumed)
                   and e.body.task_type == task_type]
        starts = [i for i, e in enumerate(events) if e.type == "JobStarted" and e.job_id in ids]
        assert resumed and starts and min(starts) > resumed[-1], (p, resumed, starts)


def test_cancel_stops_running_and_waiting_jobs(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--cancel-grace", "2"))
    engine.wait_active(3)

    patient = client.submit("patient", {"seconds": 60}, tenant="acme")
    running(patient)
    done = epochq(settings, "cancel", patient.job_id, "--reason", "not needed", "--by", "ops")
    assert done.returncode == 0 and f"job {patient.job_id} cancelled" in done.stdout, (done.stdout, done.stderr)
    assert "cancelling" in done.stderr and "Traceback" not in done.stderr
    assert types(client, patient.job_id)[-2:] == ["JobCancelRequested", "JobCancelled"]
    assert client.status(patient.job_id).reason == "not needed"

    asleep = client.submit("apatient", {"seconds": 60}, tenant="acme")
    running(asleep)
    outcome = client.cancel(asleep.job_id, tenant="acme", reason="async").wait(10, until=decided)
    assert outcome.status == "cancelled" and "JobFailed" not in types(client, asleep.job_id)

    deaf = client.submit("deaf", {"seconds": 8}, tenant="acme")
    running(deaf)
    outcome = client.cancel(deaf.job_id).wait(10, until=decided)  # the tenant read from the job's history
    assert outcome.status == "cancelled"  # after the 2 s grace, not the 8 s of sleep
    assert types(client, deaf.job_id)[-2:] == ["JobCancelRequested", "JobCancelled"]

    later = client.submit("echo", {}, tenant="acme", delay=3600)
    assert later.wait(30, until=status_is("scheduled")).status == "scheduled"
    done = epochq(settings, "cancel", later.job_id)
    assert done.returncode == 0 and "cancelled" in done.stdout

    finished = client.submit("echo", {}, tenant="acme")
    assert finished.wait(30).status == "completed"
    done = epochq(settings, "cancel", finished.job_id)
    assert done.returncode == 1 and "cancel refused" in done.stdout and "completed" in done.stdout, done.stdout
    again = epochq(settings, "cancel", patient.job_id, "--wait", "5")
    assert again.returncode == 1 and "refused" in again.stdout
    try:
        client.cancel("00000000-0000-4000-8000-000000000000")
        raise AssertionError("an unknown job without a tenant must be refused")
    except NotFoundError as e:
        assert "unknown job" in str(e)
    assert engine.proc.poll() is None


def test_a_paused_task_type_starts_nothing_until_resumed(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    typo = epochq(settings, "pause", "ecko", "--reason", "maintenance")
    assert typo.returncode == 2 and typo.stdout == "", typo
    assert typo.stderr.strip() == "epochq: error: task type: no running engine handles task type 'ecko': did you " \
                                  "mean 'echo'? give --force to go ahead anyway", typo.stderr
    done = epochq(settings, "pause", "echo", "--reason", "maintenance")
    assert done.returncode == 0 and "task type echo paused in 3 of 3 partition(s)" in done.stdout, done
    listed = epochq(settings, "pause", "--list", "--state-dir", str(engine.state_dir))
    rows = listed.stdout.splitlines()
    assert listed.returncode == 0 and rows[0].startswith("task type") and rows[-1] == "1 paused task type(s)", rows
    assert rows[1].split()[:2] == ["echo", "3"] and rows[1].endswith("maintenance"), rows
    forced = epochq(settings, "pause", "report.later", "--force", "--wait", "5")
    assert forced.returncode == 0 and "task type report.later paused in 3 of 3" in forced.stdout, forced
    held = [client.submit("echo", {"n": n}, tenant="acme") for n in range(6)]
    other = client.submit("noop", {}, tenant="acme")
    assert other.wait(30).status == "completed"  # other task types run
    assert queued(client, held) == {"queued"}  # echo waits, in the queue
    again = epochq(settings, "pause", "echo")
    assert again.returncode == 0 and "already paused in 3" in again.stdout
    done = epochq(settings, "resume", "echo")
    assert done.returncode == 0 and "resumed in 3 of 3" in done.stdout, done
    assert {o.status for o in client.wait_all(held, 30)} == {"completed"}
    started_only_after_the_resume(settings, held, "echo")
    assert engine.proc.poll() is None


def test_purge_cancels_queued_jobs_and_gives_up_dead_ones(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    state = ("--state-dir", str(engine.state_dir))
    dead = [client.submit("email.send", {"to": "a@b.c"}, tenant="acme") for _ in range(3)]  # invalid: dead at once
    assert {o.status for o in client.wait_all(dead, 30)} == {"dead"}
    assert epochq(settings, "pause", "echo").returncode == 0
    held = [client.submit("echo", {"n": n}, tenant="acme" if n % 2 else "beta") for n in range(4)]
    assert queued(client, held) == {"queued"}
    refused = epochq(settings, "purge", "queued", "--reason", "test", *state)
    assert refused.returncode == 2 and "give --yes" in refused.stderr
    done = epochq(settings, "purge", "queued", "--task-type", "echo", "--tenant", "beta", "--reason", "stale",
                  "--yes", *state)
    assert done.returncode == 0 and "2 of 2 job(s) purged" in done.stdout, (done.stdout, done.stderr)
    done = epochq(settings, "purge", "dead", "--reason", "known bug", "--yes", *state)
    assert done.returncode == 0 and "3 of 3 job(s) purged" in done.stdout, (done.stdout, done.stderr)
    statuses = [client.status(h.job_id) for h in dead + held]
    assert [o.status for o in statuses] == ["cancelled"] * 3 + ["cancelled", "queued", "cancelled", "queued"]
    assert statuses[0].reason == "purge: known bug"
    listing = epochq(settings, "dlq", "list", *state)
    assert "0 dead job(s)" in listing.stdout
    assert f"from the view in {engine.state_dir}: 3 of 3 partition(s)" in listing.stderr, listing.stderr
    assert epochq(settings, "resume", "echo").returncode == 0
    assert [o.status for o in client.wait_all([held[1], held[3]], 30)] == ["completed", "completed"]
    started_only_after_the_resume(settings, [held[1], held[3]], "echo")
    assert engine.proc.poll() is None


def test_another_tenants_refused_cancel_leaves_the_jobs_outcome_its_own(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    gate = tmp_path / "gate"
    job = client.submit("gated", {"open_when": str(gate)}, tenant="acme")
    running(job)
    refused = epochq(settings, "cancel", job.job_id, "--tenant", "other", "--wait", "10")
    assert refused.returncode == 1 and "cancel refused" in refused.stdout, (refused.stdout, refused.stderr)
    gate.touch()
    assert job.wait(30).status == "completed"
    assert "CommandRefused" in types(client, job.job_id)  # the refusal is in the history
    shown = epochq(settings, "status", job.job_id)
    assert shown.returncode == 0 and "completed" in shown.stdout, (shown.stdout, shown.stderr)
    assert "refused" not in shown.stdout and "error" not in shown.stdout, shown.stdout
    as_json = json.loads(epochq(settings, "status", job.job_id, "--json").stdout)
    assert (as_json["status"], as_json["error"], as_json["reason"], as_json["attempts"]) == ("completed", None, None, 1)
    assert as_json["result"] == {"gated": True, "attempt": 1}
    outcome = client.status(job.job_id)
    assert (outcome.status, outcome.error, outcome.reason) == ("completed", None, None)
    assert engine.proc.poll() is None
