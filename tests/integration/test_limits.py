"""Rate limits and reprioritizing on a real broker: a limited task type starts at its rate while others run at
once, a reprioritized job starts before the jobs it jumped, and a rebuild of the projections is identical."""

from __future__ import annotations

import json
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.contract.ids import job_id_for_key
from engine.contract.partitioner import partition_for
from tests.integration.conftest import start_engine, status_is, verify_partition
from tests.integration.helpers.cli import epochq


def started_at(client: Client, job_id: str) -> int:
    return next(e.event.occurred_at for e in client.status(job_id).events if e.event.type == "JobStarted")


def test_a_rate_limited_task_type_starts_at_its_rate_while_other_types_run_at_once(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    done = epochq(settings, "limits", "set", "echo", "--rate", "10/s", "--reason", "smtp quota")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "task type echo limited to 10/s (burst 1) in 3 of 3 partition(s): each starts at most 3.333/s, " \
           "1 at once" in done.stdout
    limited = [client.submit("echo", {"n": n}, tenant="acme") for n in range(40)]
    others = [client.submit("noop", {}, tenant="acme") for _ in range(20)]  # same tenant and lane, queued behind
    assert {o.status for o in client.wait_all(others, 30)} == {"completed"}
    assert {o.status for o in client.wait_all(limited, 60)} == {"completed"}
    starts = sorted(started_at(client, h.job_id) for h in limited)
    spread = (starts[-1] - starts[0]) / 1e6
    assert spread >= 3.5, spread  # 40 starts at 10/s; each partition holds its 13 or 14 at 3.33/s
    assert max(sum(1 for t in starts if s <= t < s + 1_000_000) for s in starts) <= 10 + 3  # rate + 3 buckets
    assert max(started_at(client, h.job_id) for h in others) < starts[-1]  # not blocked behind the limited ones

    state = ("--state-dir", str(engine.state_dir))
    listing = epochq(settings, "limits", "list", "--json", *state)
    rows = json.loads(listing.stdout)
    assert [(r["task_type"], r["rate"], r["burst"], r["partitions"], r["reason"]) for r in rows] == \
        [("echo", 10.0, 1, [0, 1, 2], "smtp quota")], listing.stdout
    again = epochq(settings, "limits", "set", "echo", "--rate", "10/s")
    assert again.returncode == 0 and "in 0 of 3 partition(s)" in again.stdout and "3 had this limit already" \
        in again.stdout, again.stdout
    cleared = epochq(settings, "limits", "clear", "echo")
    assert cleared.returncode == 0 and "cleared in 3 of 3 partition(s)" in cleared.stdout, cleared.stdout
    free = [client.submit("echo", {"n": n}, tenant="acme") for n in range(20)]
    assert {o.status for o in client.wait_all(free, 30)} == {"completed"}
    free_starts = sorted(started_at(client, h.job_id) for h in free)
    assert (free_starts[-1] - free_starts[0]) / 1e6 < 1.5  # no limit: as fast as the slots go

    assert engine.stop() == 0
    for p in range(3):
        result = verify_partition(engine.settings(settings), p)
        assert result.matches, result
    rebuilt = epochq(settings, "projections", "rebuild", "--all", "--verify", *state)
    assert rebuilt.returncode == 0 and rebuilt.stdout.count(": match") == 3, rebuilt.stdout + rebuilt.stderr


def keys_in(partition: int, count: int, tenant: str = "acme") -> list[str]:
    """Idempotency keys whose jobs land in ``partition`` (of 3): they compete for the same slot."""
    keys, n = [], 0
    while len(keys) < count:
        if partition_for(job_id_for_key(tenant, f"reprio-{n}"), 3) == partition:
            keys.append(f"reprio-{n}")
        n += 1
    return keys


def test_a_reprioritized_job_starts_before_the_jobs_it_jumped(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path, extra=("--slots", "NORMAL=1"))
    engine.wait_active(3)
    assert epochq(settings, "pause", "echo").returncode == 0  # everything queues up first
    *first, last = keys_in(0, 6)
    ahead = [client.submit("echo", {"n": n}, tenant="acme", priority=5, idempotency_key=k)
             for n, k in enumerate(first)]
    behind = client.submit("echo", {"n": "late"}, tenant="acme", priority=4, idempotency_key=last)
    assert {o.status for o in client.wait_all([*ahead, behind], 30, until=status_is("queued"))} == {"queued"}
    moved = epochq(settings, "reprioritize", behind.job_id, "7", "--reason", "vip", "--by", "ops")
    assert moved.returncode == 0 and f"job {behind.job_id}: priority 4 -> 7, lane NORMAL" in moved.stdout, moved
    history = [e.event for e in client.status(behind.job_id).events]
    assert history[-1].type == "JobReprioritized" and history[-1].body.requested_by == "ops"
    shown = epochq(settings, "history", behind.job_id)
    assert "JobReprioritized" in shown.stdout and "priority 4 -> 7, lane NORMAL" in shown.stdout, shown.stdout
    other = epochq(settings, "reprioritize", behind.job_id, "9", "--tenant", "beta")
    assert other.returncode == 1 and "refused" in other.stdout and "tenant" in other.stdout, other.stdout
    assert epochq(settings, "resume", "echo").returncode == 0
    assert {o.status for o in client.wait_all([*ahead, behind], 30)} == {"completed"}
    assert started_at(client, behind.job_id) < min(started_at(client, h.job_id) for h in ahead)
    late = epochq(settings, "reprioritize", behind.job_id, "9", "--json")
    assert late.returncode == 1 and json.loads(late.stdout)["status"] == "refused", late.stdout
    assert "completed" in json.loads(late.stdout)["reason"]
    assert client.reprioritize(ahead[0].job_id, 1, tenant="acme").status == "refused"
    assert engine.stop() == 0
    for p in range(3):
        assert verify_partition(engine.settings(settings), p).matches
