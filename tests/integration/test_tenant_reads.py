"""Reads scoped by tenant: a tenant that asks sees its own jobs, another tenant's read as unknown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import start_engine


def test_a_tenant_reads_its_own_jobs_and_another_tenants_as_unknown(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    job = client.submit("echo", {"secret": "acme's"}, tenant="acme")
    assert job.wait(30).status == "completed"

    assert client.status(job.job_id, tenant="acme").status == "completed"
    foreign = client.status(job.job_id, tenant="globex")
    assert foreign.status == "unknown" and not foreign.known and foreign.result is None
    assert client.status(job.job_id).status == "completed"  # an operator, asking as no tenant

    cli = [sys.executable, "-m", "engine.cli.main"]
    flags = ["--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace,
             "--state-dir", str(engine.state_dir)]
    for verb, shown in (("status", "completed"), ("history", "JobSucceeded")):
        own = subprocess.run([*cli, verb, job.job_id, "--tenant", "acme", *flags], capture_output=True, text=True)
        assert own.returncode == 0 and shown in own.stdout, own.stderr
        other = subprocess.run([*cli, verb, job.job_id, "--tenant", "globex", *flags], capture_output=True,
                               text=True)
        assert other.returncode == 1 and "unknown job" in other.stderr and "secret" not in other.stdout
