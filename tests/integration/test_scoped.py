"""Multi-tenant scoped tasks on a real broker: one child per tenant, honest per-tenant outcomes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.runtime.tenants import set_tenant
from tests.integration.conftest import eventually, start_engine


def test_a_product_scoped_job_reports_each_tenant(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tenants = [f"crm-{i}" for i in range(5)]
    for tenant in tenants:
        set_tenant(settings, tenant, weight=1.0, product="crm")
    set_tenant(settings, "billing-1", weight=1.0, product="billing")
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)

    parent = client.submit("per_tenant.sync", {"broken": ["crm-3"]}, tenant="ops", scope="product:crm")
    outcome = parent.wait(60)
    assert outcome.status == "partial" and outcome.reason == "4 succeeded, 1 failed"
    assert sorted(outcome.children) == tenants
    statuses = {t: c["status"] for t, c in outcome.children.items()}
    assert statuses == {**{t: "completed" for t in tenants}, "crm-3": "dead"}
    assert "export failed" in outcome.children["crm-3"]["error"]

    runs = (tmp_path / "marks" / "per_tenant.log").read_text().splitlines()
    attempts = {}
    for line in runs:
        job_id, attempt, _, _ = line.split()
        attempts[job_id] = max(attempts.get(job_id, 0), int(attempt))
    failed_child = outcome.children["crm-3"]["job_id"]
    assert attempts[failed_child] == 2, "the failing tenant was retried on its own"
    assert all(n == 1 for job, n in attempts.items() if job != failed_child)
    assert len(attempts) == 5, "billing-1 is not in the crm product"

    child = client.status(failed_child)
    assert child.status == "dead"
    shown = subprocess.run([sys.executable, "-m", "engine.cli.main", "status", parent.job_id, "--json",
                            "--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace],
                           capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["children"]["crm-3"]["status"] == "dead"


def test_replaying_the_failed_child_completes_the_parent(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    for tenant in ("a", "b"):
        set_tenant(settings, tenant, weight=1.0, product="p")
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    fix = tmp_path / "fixed"
    parent = client.submit("flaky", {"fixed_when": str(fix)}, tenant="ops", scope="global")
    outcome = parent.wait(60)
    assert outcome.status == "partial" and outcome.reason == "0 succeeded, 2 failed"
    fix.touch()
    for tenant, child in outcome.children.items():
        client.replay(child["job_id"], tenant=tenant, reason="fixed")  # a command acts within its tenant
    settled = eventually(lambda: (o := client.status(parent.job_id)).status == "completed" and o, 30,
                         "the parent completed", every=0.5)
    assert settled.status == "completed" and settled.reason == "2 succeeded, 0 failed"
