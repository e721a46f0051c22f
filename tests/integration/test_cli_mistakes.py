"""An operator's mistakes against a real broker: exit 2 naming the flag, never "internal error"; refusals in
plain words; a duplicate key said to be one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.runtime.tenants import BROKER_WAIT_ENV
from tests.integration.conftest import ROOT, start_engine, status_is
from tests.integration.helpers.cli import epochq, one_line

SPACE_APP = '''
from engine import App
app = App()

@app.task("report build")
def build(ctx, payload):
    return {}
'''


def engine_run(settings: Settings, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engine.cli.main", "engine", "run", *args, "--bootstrap",
           settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir", str(cwd / "state")]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_engine_run_refuses_bad_counts_and_task_names_naming_them(settings: Settings, tmp_path: Path) -> None:
    for value in ("-3", "0"):
        done = engine_run(settings, ROOT, "tests.integration.apps:app", "--concurrency", value)
        assert done.returncode == 2, done.stderr
        assert one_line(done) == f"epochq: error: --concurrency: must be 1 or more worker slots, got {value}"
    (tmp_path / "spaceapp.py").write_text(SPACE_APP)
    done = engine_run(settings, tmp_path, "spaceapp:app")
    assert done.returncode == 2, done.stderr
    assert one_line(done) == ("epochq: error: app: cannot load 'spaceapp:app': task name: expected a non-empty "
                              "string without whitespace, got 'report build'")


def test_an_app_module_that_does_not_import_is_a_user_error_naming_file_and_line(settings: Settings,
                                                                                 tmp_path: Path) -> None:
    (tmp_path / "typo.py").write_text("from engine import App\napp = App(\n\ndef build(ctx, payload):\n    pass\n")
    done = engine_run(settings, tmp_path, "typo:app")
    assert done.returncode == 2, done.stderr
    assert one_line(done).startswith(f"epochq: error: app: cannot load 'typo:app': SyntaxError at "
                                     f"{tmp_path / 'typo.py'}:2: "), done.stderr
    (tmp_path / "boom.py").write_text("from engine import App\napp = App()\nLIMIT = int('ten')\n")
    done = engine_run(settings, tmp_path, "boom:app")
    assert done.returncode == 2, done.stderr
    assert one_line(done) == (f"epochq: error: app: cannot load 'boom:app': importing it raised ValueError at "
                              f"{tmp_path / 'boom.py'}:3: invalid literal for int() with base 10: 'ten'")


def test_version_is_printed() -> None:
    done = subprocess.run([sys.executable, "-m", "engine.cli.main", "--version"], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.startswith("epochq "), (done.stdout, done.stderr)


def test_acl_apply_on_a_broker_without_an_authorizer_says_so_first(settings: Settings) -> None:
    done = epochq(settings, "acl", "apply")
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert "has no authorizer, so it keeps no ACLs" in one_line(done)


def test_operator_commands_read_the_tenant_and_say_why_in_plain_words(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    later = client.submit("echo", {}, tenant="acme", delay=3600)
    assert later.wait(30, until=status_is("scheduled")).status == "scheduled"
    moved = epochq(settings, "reschedule", later.job_id, "--delay", "7200")
    assert moved.returncode == 0 and f"job {later.job_id} rescheduled to 20" in moved.stdout, moved

    cancelled = epochq(settings, "cancel", later.job_id)
    assert cancelled.returncode == 0, cancelled
    again = epochq(settings, "cancel", later.job_id)
    assert again.returncode == 1 and again.stdout.strip() == f"job {later.job_id}: cancel refused: job is already " \
                                                             "cancelled", again
    late = epochq(settings, "reschedule", later.job_id, "--delay", "5")
    assert late.returncode == 1, late
    assert late.stdout.strip() == f"job {later.job_id}: refused: only a scheduled or retrying job can be " \
                                  "rescheduled; this one is cancelled"

    first = epochq(settings, "submit", "echo", "--tenant", "acme", "--key", "order-7", "--payload", '{"n": 1}',
                   "--wait")
    assert first.returncode == 0 and "duplicate" not in first.stderr, first
    same = epochq(settings, "submit", "echo", "--tenant", "acme", "--key", "order-7", "--payload", '{"n": 1}')
    assert same.returncode == 0 and "epochq: duplicate: key 'order-7' is job" in same.stderr, same
    assert "payload" not in same.stderr
    other = epochq(settings, "submit", "echo", "--tenant", "acme", "--key", "order-7", "--payload", '{"n": 2}')
    assert other.returncode == 0 and "no new job was submitted, and the payload given differs from that job's" \
        in other.stderr, other

    engine.stop()
    assert (engine.state_dir / settings.namespace / "p0001").is_dir(), list(engine.state_dir.rglob("*"))[:20]
    partial = tmp_path / "partial"
    shutil.copytree(engine.state_dir / settings.namespace / "p0001", partial / settings.namespace / "p0001")
    verified = epochq(settings, "projections", "rebuild", "--all", "--verify", "--parallel", "1",
                      "--state-dir", str(partial))
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    assert "partition 1: match" in verified.stdout and "partition 0" not in verified.stdout
    assert "partition(s) 0,2 have no store in" in verified.stderr


def test_an_engine_without_a_broker_says_what_it_waits_for_in_a_few_lines(settings: Settings) -> None:
    cmd = [sys.executable, "-m", "engine.cli.main", "engine", "run", "tests.integration.apps:app", "--bootstrap",
           "127.0.0.1:1", "--namespace", settings.namespace, "--state-dir", str(settings.state_dir)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, BROKER_WAIT_ENV: "3"})  # 30 s by default: the same lines, sooner
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 3 and len(lines) <= 5, lines
    assert "reading" in lines[0] and "from Kafka at 127.0.0.1:1 (waits up to 3 s" in lines[0], lines
    assert not any(line.startswith("%") or "KafkaError{" in line for line in lines), lines
    assert lines[-1] == (f"epochq: error: cannot read {settings.tenants_topic} from Kafka at 127.0.0.1:1: "
                         "Failed to get metadata: Local: Broker transport failure"), lines
