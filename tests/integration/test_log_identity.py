"""A state directory folded from another log (the topics deleted and created again) is wiped, not trusted."""

from __future__ import annotations

import re
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from engine.client import Client
from engine.config import Settings
from engine.runtime.topics import ensure_topics
from tests.integration.conftest import EngineProcess, eventually, start_engine

OLD_DELAY_S = 8.0
"""How far ahead the old log's job is due: past the first engine's stop (it must not run there). It may come due before
the engine of the old store starts again: trusted, that store would run it at once, overdue, before the new job."""
WIPED = re.compile(r"(partition \d+|view: partition \d+): store .* was folded from another log")


def recreate_topics(admin: AdminClient, settings: Settings) -> None:
    """Delete every topic of the namespace, wait until the cluster forgets them, and create them again."""
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(settings.namespace + ".")]
    for future in admin.delete_topics(names, operation_timeout=30).values():
        future.result()
    eventually(lambda: not any(t.startswith(settings.namespace + ".") for t in admin.list_topics(timeout=10).topics),
               30, "the namespace's topics to be gone")
    eventually(lambda: ensure_topics(settings, partitions=3), 30, "the namespace's topics to be created again")


def slow_runs(tmp: Path) -> list[str]:
    """The job ids the ``slow`` handler ran, in order (tests/integration/apps.py leaves a mark per run)."""
    marks = tmp / "marks" / "slow.log"
    return [line.split()[0] for line in marks.read_text().splitlines()] if marks.exists() else []


def test_a_state_directory_of_a_deleted_log_is_wiped_and_its_jobs_never_run(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, kafka_admin: AdminClient, tmp_path: Path) -> None:
    first = start_engine(engines, settings, "a", tmp_path)
    first.wait_active(3)
    assert all(client.submit("noop", {"n": i}, tenant="acme").wait(30).status == "completed" for i in range(6))
    old_due = time.time() + OLD_DELAY_S
    old = client.submit("slow", {"seconds": 0}, tenant="acme", run_at=old_due)
    old.wait(30, until=lambda outcome: outcome.status == "scheduled")
    assert first.stop() == 0

    recreate_topics(kafka_admin, settings)
    fresh = Client(settings)
    try:
        # another engine writes the new log past the old stores' offsets, so only the log's identity tells them apart
        other = start_engine(engines, settings, "b", tmp_path)
        other.wait_active(3)
        handles = [fresh.submit("noop", {"n": i}, tenant="acme") for i in range(60)]
        assert all(o.status == "completed" for o in fresh.wait_all(handles, timeout=120))
        assert other.stop() == 0

        again = EngineProcess(settings, "a", tmp_path)  # the first engine's state directory
        engines.append(again)
        again.wait_active(3)
        new = fresh.submit("slow", {"seconds": 0}, tenant="acme", run_at=max(old_due, time.time()) + 1)
        assert new.wait(60).status == "completed"
        assert slow_runs(tmp_path) == [new.job_id], "a job of the deleted log ran"
        wiped = eventually(lambda: WIPED.findall(again.logs()), 30, "the view's stores to be wiped too")
        logs = again.logs()
        assert sorted(w for w in wiped if not w.startswith("view")) == [f"partition {p}" for p in range(3)], logs
        assert len(wiped) == len(set(wiped)) == 6, logs  # one WARNING per store: three owner's, three view's
        assert fresh.status(old.job_id, tenant="acme").status == "unknown"
        with Client(again.settings(settings)) as viewer:  # the view of the first engine's state directory
            def listed() -> set[str]:
                ids = {row.job_id for row in viewer.jobs(tenant="acme", limit=1000).rows}
                return ids if len(ids) >= 61 else set()  # the new log's 60 no-ops and its slow job

            ids = eventually(listed, 30, "the view to list the new log's jobs")
        assert new.job_id in ids and old.job_id not in ids and len(ids) == 61, len(ids)
    finally:
        fresh.close()
