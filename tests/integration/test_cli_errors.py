"""The CLI against a real broker with careless input: one line on stderr, never a traceback, a status that says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.client import Client
from engine.config import Settings
from engine.errors import ValidationError
from engine.runtime.tenants import set_tenant
from tests.integration.conftest import ROOT, start_engine, status_is
from tests.integration.helpers import cli
from tests.integration.helpers.cli import one_line


def epochq(settings: Settings, *args: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    """``epochq ARGS`` on the test's namespace (or ``namespace``) and its state directory."""
    return cli.epochq(settings, *args, "--state-dir", str(settings.state_dir), namespace=namespace)


def test_topics_describe_before_ensure_says_to_ensure(settings: Settings) -> None:
    done = epochq(settings, "topics", "describe", namespace=f"{settings.namespace}-none")
    assert done.returncode == 2 and "run `epochq topics ensure` first" in one_line(done)


def test_topics_ensure_refuses_other_counts_for_existing_topics(settings: Settings) -> None:
    for flag, value, words in (("--partitions", "6", "events has 3 partitions, not 6"),
                               ("--replication", "3", "events has replication 1, not 3")):
        done = epochq(settings, "topics", "ensure", flag, value)
        assert done.returncode == 2 and words in one_line(done), done.stderr
    same = epochq(settings, "topics", "ensure", "--partitions", "3", "--replication", "1")
    assert same.returncode == 0 and "3 partitions" in same.stdout
    plain = epochq(settings, "topics", "ensure")
    assert plain.returncode == 0, plain.stderr


def test_removing_an_unknown_tenant_says_so(settings: Settings) -> None:
    done = epochq(settings, "tenants", "remove", "neverexisted")
    assert done.returncode == 1 and "no tenant 'neverexisted'" in one_line(done) and done.stdout == ""
    set_tenant(settings, "real", 2.0)
    done = epochq(settings, "tenants", "remove", "real")
    assert done.returncode == 0 and "tenant real removed" in done.stdout


def test_a_closed_stdout_ends_quietly(settings: Settings) -> None:
    set_tenant(settings, "acme", 1.0)
    read, write = os.pipe()
    cmd = [sys.executable, "-m", "engine.cli.main", "tenants", "list", "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    os.close(read)  # like `| head` having exited
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_status_of_unknown_and_scheduled_jobs(settings: Settings, client: Client) -> None:
    assert client.status("00000000-0000-4000-8000-000000000000").status == "unknown"
    done = epochq(settings, "status", "00000000-0000-4000-8000-000000000000")
    assert done.returncode == 1 and "unknown job" in one_line(done)
    done = epochq(settings, "history", "00000000-0000-4000-8000-000000000000")
    assert done.returncode == 1 and "unknown job" in one_line(done)
    for bad, why in ((None, "must be a string, got NoneType"), ("", "must not be empty")):
        with pytest.raises(ValidationError, match=f"^job_id: {why}"):
            client.status(bad)  # type: ignore[arg-type]
    done = epochq(settings, "status", "")
    assert done.returncode == 2 and one_line(done) == "epochq: error: job_id: must not be empty"


def test_wait_that_runs_out_exits_4_and_status_shows_the_due_time(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    done = epochq(settings, "submit", "slow", "--tenant", "acme", "--payload", '{"seconds": 5}', "--wait",
                  "--timeout", "1")
    assert done.returncode == 4, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("%")]
    assert lines[-1].endswith("still running after 1 s") and "Traceback" not in done.stderr, lines
    assert [line.split(": ", 2)[2] for line in lines[:-1]] == ["accepted", "queued", "running (attempt 1)"], lines
    later = client.submit("echo", {}, tenant="acme", delay=3600)
    assert later.wait(30, until=status_is("scheduled")).status == "scheduled"
    shown = epochq(settings, "status", later.job_id)
    assert shown.returncode == 0 and ": scheduled" in shown.stdout and "  due: 20" in shown.stdout, shown.stdout
    assert engine.proc.poll() is None


def test_rebuilding_a_partition_the_topic_does_not_have_is_refused_and_leaves_nothing(settings: Settings) -> None:
    for partition in ("3", "-1"):
        done = epochq(settings, "projections", "rebuild", "--partition", partition)
        assert done.returncode == 2, done.stderr
        assert one_line(done) == f"epochq: error: --partition: {settings.events_topic} has partitions 0-2, " \
                                 f"not {partition}"
    root = Path(settings.state_dir) / settings.namespace
    assert not root.exists() or not list(root.iterdir())  # no lock or rebuild directory left behind


def test_a_relative_time_past_any_date_is_refused_naming_the_flag(settings: Settings) -> None:
    done = epochq(settings, "submit", "echo", "--tenant", "a", "--run-at", "+99999999d")
    assert done.returncode == 2 and one_line(done).startswith("epochq: error: run_at: '+99999999d' is further"), \
        done.stderr


def test_a_wait_with_no_engine_says_nothing_decided_the_command(settings: Settings) -> None:
    done = epochq(settings, "submit", "echo", "--tenant", "a", "--wait", "--timeout", "1")
    assert done.returncode == 4 and one_line(done).endswith(
        "still submitted after 1 s (no engine decided its command: is one running on this namespace?)"), done.stderr
