"""``epochq audit`` against a real engine: a tenant's export equals its jobs' histories, with or without projections."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from engine.cli.audit import CSV_COLUMNS
from engine.client import Client, JobHandle
from engine.config import Settings
from engine.contract.partitioner import partition_for
from engine.questions.audit import AuditFilter, AuditSummary, audit_events
from engine.questions.history import job_events
from engine.contract import messages as m
from tests.integration.conftest import start_engine
from tests.integration.helpers.raw import decided, produce_raw


def iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat()


def now_us() -> int:
    return time.time_ns() // 1000


def submit_batch(client: Client, tmp_path: Path, tag: str) -> dict[str, list[JobHandle]]:
    """Echo jobs for two tenants plus one job each that dead-letters after 4 attempts."""
    handles: dict[str, list[JobHandle]] = {}
    for tenant in ("alpha", "beta"):
        echo = client.submit_many([{"task_type": "echo", "payload": {"tag": tag, "n": i}, "tenant": tenant}
                                   for i in range(4)])
        dead = client.submit("flaky", {"fixed_when": str(tmp_path / "never")}, tenant=tenant)
        handles[tenant] = [*echo, dead]
    for tenant_handles in handles.values():
        statuses = [h.wait(60).status for h in tenant_handles]
        assert statuses == ["completed"] * 4 + ["dead"], statuses
    return handles


def expected_ids(settings: Settings, job_ids: list[str], since: int | None, until: int | None) -> dict[int, list[str]]:
    """The jobs' histories (``job_events``) within [since, until), per partition in offset order."""
    per_partition: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for job_id in job_ids:
        for logged in job_events(settings, job_id):
            at = logged.event.occurred_at
            if (since is None or at >= since) and (until is None or at < until):
                per_partition[partition_for(job_id, 3)].append((logged.offset, logged.event.event_id))
    return {p: [event_id for _, event_id in sorted(rows)] for p, rows in per_partition.items()}


def by_partition(rows: list[dict]) -> dict[int, list[str]]:  # type: ignore[type-arg]
    out: dict[int, list[str]] = defaultdict(list)
    for row in rows:
        out[row["partition"]].append(row["event_id"])
    return dict(out)


def run_audit(settings: Settings, state_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engine.cli.main", "audit", "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace, "--state-dir", str(state_dir), *flags]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run


def test_audit_of_a_tenant_over_a_time_range_equals_its_jobs_histories(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    before = submit_batch(client, tmp_path, "before")
    since = now_us()
    during = submit_batch(client, tmp_path, "during")
    until = now_us()
    alpha_jobs = [h.job_id for h in before["alpha"] + during["alpha"]]

    rows = [json.loads(line) for line in
            run_audit(settings, engine.state_dir, "--tenant", "alpha", "--since", iso(since), "--until", iso(until),
                      "--format", "jsonl").stdout.splitlines()]
    expected = expected_ids(settings, alpha_jobs, since, until)
    assert by_partition(rows) == expected
    assert "3 through the tenant index" in run_audit(settings, engine.state_dir, "--tenant", "alpha").stderr
    assert [(r["partition"], r["offset"]) for r in rows] == sorted((r["partition"], r["offset"]) for r in rows)
    assert {r["job_id"] for r in rows} == {h.job_id for h in during["alpha"]}  # the earlier batch is out of range
    assert {r["tenant"] for r in rows} == {"alpha"} and not any(r["fenced"] for r in rows)
    dead_types = [r["type"] for r in rows if r["job_id"] == during["alpha"][-1].job_id]
    assert dead_types.count("JobFailed") == 4 and dead_types[-1] == "JobDeadLettered"
    failed = next(r for r in rows if r["type"] == "JobFailed")
    assert failed["error"].startswith("ConnectionError: downstream unavailable") and failed["attempt"] == 1

    summary = AuditSummary()
    everything = list(audit_events(settings, AuditFilter("alpha"), summary))
    assert by_partition([{"partition": a.partition, "event_id": a.logged.event.event_id} for a in everything]) \
        == expected_ids(settings, alpha_jobs, None, None)
    assert (summary.events, len(summary.jobs), summary.fenced) == (len(everything), 10, 0)
    flaky = list(audit_events(settings, AuditFilter("alpha", task_type="flaky")))
    assert {a.logged.event.job_id for a in flaky} == {before["alpha"][-1].job_id, during["alpha"][-1].job_id}

    # The log is the source: stop the engine, delete its projections, export again.
    assert engine.stop() == 0
    shutil.rmtree(engine.state_dir)
    again = run_audit(settings, engine.state_dir, "--tenant", "alpha", "--since", iso(since), "--until", iso(until),
                      "--format", "jsonl")
    assert [json.loads(line) for line in again.stdout.splitlines()] == rows
    assert f"{len(rows)} events of 5 jobs, 0 fenced writes" in again.stderr
    assert not engine.state_dir.exists()

    out = tmp_path / "alpha.csv"
    run_audit(settings, engine.state_dir, "--tenant", "alpha", "--since", iso(since), "--until", iso(until),
              "--format", "csv", "--out", str(out))
    table = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert tuple(table[0]) == CSV_COLUMNS
    assert table[1:] == [["" if r[c] is None else str(r[c]) for c in CSV_COLUMNS] for r in rows]


def test_audit_through_a_stale_store_equals_a_full_scan(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    """A store behind the log: its tenant index answers up to its offset, the log after it is scanned.

    After the copy, jobs are submitted, and commands name other tenants' jobs (a cancel of alpha's
    job sent as beta, of beta's job sent as alpha, both refused): whose each job is must come out as
    a full scan says.
    """
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    first = submit_batch(client, tmp_path, "first")
    assert engine.stop() == 0
    stale = tmp_path / "stale-state"
    shutil.copytree(engine.state_dir, stale)
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    later = submit_batch(client, tmp_path, "later")
    scheduled = {t: client.submit("echo", {}, tenant=t, delay=3600) for t in ("alpha", "beta")}
    for job, sent_as in ((first["alpha"][0].job_id, "beta"), (first["beta"][0].job_id, "alpha"),  # refused
                         (scheduled["alpha"].job_id, "beta"), (scheduled["beta"].job_id, "alpha"),  # refused
                         (scheduled["alpha"].job_id, "alpha"), (scheduled["beta"].job_id, "beta"),
                         ("never-submitted", "alpha")):
        client.cancel(job, tenant=sent_as, reason="test")
    assert scheduled["beta"].wait(30).status == "cancelled"
    # a refusal about beta's job that carries the sender's tenant, alpha: the job is still beta's
    report = m.Command("report-1", first["beta"][1].job_id, "alpha", now_us(),
                       m.ReportChild(first["beta"][1].job_id, "child", "alpha", "completed"))
    produce_raw(settings, [report])
    assert [e.tenant_id for e in decided(settings, report)] == ["alpha"]

    for tenant in ("alpha", "beta"):
        through_index = run_audit(settings, stale, "--tenant", tenant)
        full = run_audit(settings, tmp_path / "no-state", "--tenant", tenant)
        assert "3 through the tenant index" in through_index.stderr and "index" not in full.stderr
        assert through_index.stdout == full.stdout and full.stdout
        rows = [json.loads(line) for line in full.stdout.splitlines()]
        assert {r["tenant"] for r in rows if r["type"] == "JobSubmitted"} == {tenant}
    jobs = {json.loads(line)["job_id"] for line in run_audit(settings, stale, "--tenant", "alpha").stdout.splitlines()}
    assert {first["alpha"][0].job_id, later["alpha"][0].job_id, scheduled["alpha"].job_id, "never-submitted"} <= jobs
    assert first["beta"][0].job_id not in jobs and scheduled["beta"].job_id not in jobs
    assert first["beta"][1].job_id not in jobs
