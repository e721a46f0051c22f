"""Tenant identity on commands, on a real broker: with signatures required, an engine runs a job
its tenant signed, rejects an unsigned submit and a submit signed with another tenant's key, and
refuses another tenant's cancel of an existing job; a tenant's key cannot reach other tenants' work
(task-type controls, cross-tenant scopes, their schedules), an operator's key can; the engines' own
commands (scoped fan-out, schedule occurrences) pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.client import Client
from engine.contract import messages as m
from engine.config import Settings
from engine.runtime.tenants import TenantDirectory, set_tenant
from tests.integration.conftest import EngineProcess, eventually, start_engine
from tests.integration.helpers.keys import key_files


def signatures_required(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *names: str,
                        product: str | None = "shop") -> dict[str, tuple[Path, Path]]:
    """Key pairs (private, public PEM files) for acme, globex, the engines and ``names``; acme's and globex's public
    keys in the tenants table (in ``product``); and the environment of an engine that requires signed commands,
    signing its own with the engines' key (and trusting the operators' public key, when "operator" is named)."""
    from engine.contract.signing import load_public_key

    keys = {name: key_files(tmp_path, name) for name in ("acme", "globex", "engine", *names)}
    for tenant in ("acme", "globex"):
        set_tenant(settings, tenant, 1.0, product=product, public_keys=[load_public_key(keys[tenant][1])])
    monkeypatch.setenv("EPOCHQ_REQUIRE_SIGNATURES", "true")
    monkeypatch.setenv("EPOCHQ_ENGINE_KEY_FILE", str(keys["engine"][0]))
    if "operator" in keys:
        monkeypatch.setenv("EPOCHQ_OPERATOR_PUBLIC_KEY_FILE", str(keys["operator"][1]))
    return keys


def test_an_engine_requiring_signatures_runs_only_what_the_tenant_signed(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.contract.signing import load_public_key

    keys = signatures_required(settings, tmp_path, monkeypatch)
    (acme_key, acme_pub), (globex_key, _) = keys["acme"], keys["globex"]
    set_tenant(settings, "acme", 2.0, product="shop")  # a new weight keeps the tenant's key
    with TenantDirectory(settings) as table:
        assert table.public_keys("acme") == (load_public_key(acme_pub),) and table.weight("acme") == 2.0
    engine = EngineProcess(settings, "signed", tmp_path)
    try:
        engine.wait_active(3)
        acme = Client(settings.model_copy(update={"signing_key_file": acme_key}))
        unsigned = Client(settings)
        mallory = Client(settings.model_copy(update={"signing_key_file": globex_key}))

        signed = acme.submit("echo", {"n": 1}, tenant="acme").wait(30)
        assert signed.status == "completed" and signed.result["payload"] == {"n": 1}, engine.logs()[-2000:]
        for client in (unsigned, mallory):
            outcome = client.submit("echo", {"n": 2}, tenant="acme").wait(30)
            assert outcome.status == "rejected" and outcome.reason == "unauthenticated", outcome

        later = acme.submit("echo", {"n": 3}, tenant="acme", delay=60)
        eventually(lambda: acme.status(later.job_id).status == "scheduled", what="the job scheduled")
        mallory.cancel(later.job_id, tenant="acme", reason="mallory")
        unsigned.cancel(later.job_id, tenant="acme", reason="anyone")
        eventually(lambda: _refusals(acme, later.job_id) >= 2, what="both cancels refused")
        assert acme.status(later.job_id).status == "scheduled"
        mallory.cancel(later.job_id, tenant="globex", reason="as myself")  # signed, but not globex's job
        eventually(lambda: _refusals(acme, later.job_id, "tenant: job") >= 1, what="globex's cancel refused")
        assert acme.status(later.job_id).status == "scheduled"
        acme.cancel(later.job_id, tenant="acme", reason="changed my mind")
        eventually(lambda: acme.status(later.job_id).status == "cancelled", what="the job cancelled")

        fanned = acme.submit("echo", {"n": 4}, tenant="acme", scope="product:shop").wait(30)
        assert fanned.status == "rejected" and fanned.reason == "unauthorized", fanned  # runs as globex: an operator's
        for client in (acme, unsigned, mallory):
            client.close()
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]
    assert "unauthenticated command" in engine.logs()


def _refusals(client: Client, job_id: str, why: str = "unauthenticated") -> int:
    return sum(1 for e in client.status(job_id).events
               if e.event.type == "CommandRefused" and why in e.event.body.reason)


def test_a_command_acts_only_within_its_tenant_even_unsigned(settings: Settings, client: Client, engines,  # type: ignore[no-untyped-def]
                                                              tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    later = client.submit("echo", {}, tenant="acme", delay=60)
    eventually(lambda: client.status(later.job_id).status == "scheduled", what="the job scheduled")
    client.cancel(later.job_id, tenant="globex", reason="not mine")
    client.cancel(later.job_id, tenant="", reason="no tenant at all")  # an empty tenant, sent as it is
    eventually(lambda: _refusals(client, later.job_id, "tenant: job") >= 2, what="both cancels refused")
    refusals = [e.event for e in client.status(later.job_id).events if e.event.type == "CommandRefused"]
    assert all(e.tenant_id == "acme" for e in refusals)  # recorded in acme's history, for its audit
    assert client.status(later.job_id).status == "scheduled"
    assert client.cancel(later.job_id, tenant="acme").wait(10).status == "cancelled"


def _decided(outcomes) -> list[str]:  # type: ignore[no-untyped-def]
    """Each partition's decision on a task-type command: the event type, or the refusal's reason."""
    out = []
    for outcome in outcomes:
        body = outcome.events[-1].event.body if outcome.events else None
        out.append(body.reason.split(":")[0] if isinstance(body, m.CommandRefused) else type(body).__name__)
    return out


def _signed_as(client: Client, tenant: str, body: m.PauseTaskType | m.SetRateLimit) -> list:  # type: ignore[type-arg]
    """A task-type command to every partition, naming ``tenant`` (the client signs it with its tenant's key)."""
    from engine.commands import new_command
    from engine.domain.pauses import task_envelope
    from engine.domain.ratelimits import limit_envelope

    envelope = task_envelope if isinstance(body, m.PauseTaskType) else limit_envelope
    handles = client._send([new_command(envelope(body.task_type, p, 3), tenant, body) for p in range(3)])
    return client.wait_all(handles, 10, until=lambda o: bool(o.events))


def _schedule_as(client: Client, signer_tenant: str, runs_as: str):  # type: ignore[no-untyped-def]
    """An UpsertSchedule naming ``signer_tenant`` on the command and ``runs_as`` as the schedule's tenant."""
    from engine.commands import new_command
    from engine.domain.schedules import envelope_id

    body = m.UpsertSchedule("acme-minutely", runs_as, "echo", "* * * * * *", m.Payload(b"{}", "application/json", ""))
    return client._decided("acme-minutely", new_command(envelope_id("acme-minutely"), signer_tenant, body), 10)


def test_a_tenants_key_cannot_reach_another_tenants_work_and_an_operators_can(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = signatures_required(settings, tmp_path, monkeypatch, "operator")
    acme_key, globex_key, operator_key = (keys[name][0] for name in ("acme", "globex", "operator"))
    engine = EngineProcess(settings, "powers", tmp_path)
    try:
        engine.wait_active(3)
        acme = Client(settings.model_copy(update={"signing_key_file": acme_key}))
        globex = Client(settings.model_copy(update={"signing_key_file": globex_key}))
        operator = Client(settings.model_copy(update={"operator_key_file": operator_key}))

        # globex, with a valid signature of its own, against acme's work: each refused
        assert set(_decided(_signed_as(globex, "globex", m.PauseTaskType("echo")))) == {"unauthorized"}
        assert set(_decided(_signed_as(globex, "globex", m.SetRateLimit("echo", 0.01, 1)))) == {"unauthorized"}
        assert set(_decided(globex.pause_task_type("noop"))) == {"unauthenticated"}  # as the CLI sends it: no tenant
        scoped = globex.submit("echo", {"as": "acme?"}, tenant="globex", scope="global").wait(30)
        assert scoped.status == "rejected" and scoped.reason == "unauthorized", scoped
        as_acme = _schedule_as(globex, "globex", "acme")  # signed by globex, running as acme
        assert as_acme.status == "refused" and as_acme.reason.startswith("unauthorized"), as_acme
        assert globex.add_schedule("acme-minutely", "echo", "* * * * * *", tenant="acme").status == "refused"
        assert acme.submit("echo", {"n": 1}, tenant="acme").wait(30).status == "completed"  # neither held nor slowed

        # a tenant manages its own schedules; another tenant cannot take one over, pause or remove it
        own = acme.add_schedule("acme-tick", "echo", "0 3 * * *", tenant="acme")
        assert own.accepted, own
        taken = globex.add_schedule("acme-tick", "echo", "* * * * * *", tenant="globex")
        assert taken.status == "refused" and "belongs to tenant 'acme'" in taken.reason, taken
        assert globex.pause_schedule("acme-tick", tenant="globex").status == "refused"
        assert globex.remove_schedule("acme-tick", tenant="globex").status == "refused"
        assert acme.pause_schedule("acme-tick", tenant="acme").accepted
        assert acme.remove_schedule("acme-tick", tenant="acme").accepted

        # the operator keeps every power
        def as_operator() -> Client:  # a fresh client per call: each follows its commands from the log's end now
            return Client(settings.model_copy(update={"operator_key_file": operator_key}))

        assert set(_decided(as_operator().pause_task_type("echo", reason="maintenance"))) == {"TaskTypePaused"}
        assert set(_decided(as_operator().resume_task_type("echo"))) == {"TaskTypeResumed"}
        assert set(_decided(as_operator().set_rate_limit("echo", 100.0))) == {"RateLimitSet"}
        assert set(_decided(as_operator().clear_rate_limit("echo"))) == {"RateLimitCleared"}
        fanned = operator.submit("echo", {"n": 2}, tenant="ops", scope="global").wait(60)
        assert fanned.status == "completed" and set(fanned.children) == {"acme", "globex"}, fanned
        for client in (acme, globex, operator):
            client.close()
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]
    assert "unauthorized command" in engine.logs() and " WARNING " in engine.logs()


def test_a_dependency_is_a_job_of_the_same_tenant_and_no_tenant_can_release_a_waiting_job(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signed commands of jobs that wait for jobs: the engines' own AwaitJob and ReportDependency pass; a tenant
    waiting for another tenant's job is told it is unknown; a report signed by a tenant (its own or another's)
    is refused and releases nothing."""
    from engine.commands import new_command

    keys = signatures_required(settings, tmp_path, monkeypatch, product=None)
    acme_key, globex_key = keys["acme"][0], keys["globex"][0]
    engine = EngineProcess(settings, "signed", tmp_path)
    try:
        engine.wait_active(3)
        acme = Client(settings.model_copy(update={"signing_key_file": acme_key}))
        mallory = Client(settings.model_copy(update={"signing_key_file": globex_key}))
        gate = acme.submit("gated", {"open_when": str(tmp_path / "gate")}, tenant="acme")
        waiting = acme.submit("gather", {}, tenant="acme", depends_on=[gate])
        eventually(lambda: acme.status(gate.job_id).dependents == [waiting.job_id], what="the dependent recorded")
        stranger = mallory.submit("gather", {}, tenant="globex", depends_on=[gate], if_dependency_fails="run")
        answered = stranger.wait(30)
        assert answered.status == "cancelled" and answered.reason.startswith("dependency_unknown: "), answered
        release = m.ReportDependency(gate.job_id, "completed", b"{}")
        for client, tenant in ((mallory, "globex"), (mallory, "acme"), (acme, "acme")):
            client._send([new_command(waiting.job_id, tenant, release)])
        eventually(lambda: _refusals(acme, waiting.job_id, "") >= 3, what="three forged reports refused")
        mallory._send([new_command(gate.job_id, "acme", m.AwaitJob(stranger.job_id))])
        eventually(lambda: _refusals(acme, gate.job_id, "") >= 1, what="the forged AwaitJob refused")
        assert acme.status(waiting.job_id).status == "waiting"
        assert acme.status(gate.job_id).dependents == [waiting.job_id]
        (tmp_path / "gate").touch()
        done = waiting.wait(60)
        assert done.status == "completed" and done.result["dependencies"] == {
            gate.job_id: {"gated": True, "attempt": 1}}
        for client in (acme, mallory):
            client.close()
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]


def test_a_workers_result_counts_only_signed_with_a_key_of_the_pool_its_attempt_went_to(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engines) -> None:  # type: ignore[no-untyped-def]
    """A tenant's key, no signature, another pool's key: refused, the job untouched; the pool's key (the worker's
    EPOCHQ_WORKER_KEY_FILE) completes it, and an operator's key still may."""
    import shutil

    from engine.commands import new_command
    from engine.domain.fence import fencing_token
    from tests.integration.test_workers import APP, WorkerProcess, marks

    keys = signatures_required(settings, tmp_path, monkeypatch, "operator", "gpu", "cpu")
    (tmp_path / "pools").mkdir()
    for pool in ("gpu", "cpu"):
        shutil.copy(keys[pool][1], tmp_path / "pools" / f"{pool}.pem")
    monkeypatch.setenv("EPOCHQ_POOL_PUBLIC_KEYS_DIR", str(tmp_path / "pools"))
    start_engine(engines, settings, "a", tmp_path, app=APP).wait_active(3)
    acme = Client(settings.model_copy(update={"signing_key_file": keys["acme"][0]}))
    signers = {name: Client(settings.model_copy(update={"signing_key_file": keys[name][0]}))
               for name in ("cpu", "operator")}
    unsigned = Client(settings)
    worker = None
    try:
        handle = acme.submit("remote.echo", {"n": 1}, tenant="acme")  # no worker yet: it waits, queued
        forged = m.ReportAttempt(1, 1, "succeeded", 5, b'{"forged": true}', worker="mallory", pool="gpu")
        for client in (acme, unsigned, signers["cpu"]):  # the job's own tenant's key, none, another pool's
            client._send([new_command(handle.job_id, "acme", forged)])
        eventually(lambda: _refusals(acme, handle.job_id, "a tenant's key may not sign results") == 1
                   and _refusals(acme, handle.job_id, "this one is unsigned") == 1
                   and _refusals(acme, handle.job_id, "unauthorized: a worker's result (ReportAttempt) signed with "
                                                      "pool 'cpu''s key") == 1, 60, "the three results refused")
        assert acme.status(handle.job_id).status == "queued"
        monkeypatch.setenv("EPOCHQ_WORKER_KEY_FILE", str(keys["gpu"][0]))  # the worker signs with its pool's key
        worker = WorkerProcess(settings, "w1", tmp_path)
        outcome = handle.wait(60)
        assert outcome.status == "completed" and outcome.result["pid"] == worker.proc.pid, worker.logs()[-2000:]
        assert outcome.pool == "gpu" and _refusals(acme, handle.job_id, "") == 3

        slow = acme.submit("remote.slow", {"seconds": 8}, tenant="acme")  # out with the gpu worker a while
        eventually(lambda: any(line[0] == slow.job_id for line in marks(tmp_path)), 60, "the slow job to start")
        started = next(e.event for e in acme.status(slow.job_id).events if isinstance(e.event.body, m.JobStarted))
        assert started.body.pool == "gpu"  # type: ignore[union-attr]
        token = fencing_token(started.epoch, 1)
        stolen = m.ReportAttempt(1, token, "succeeded", 5, b'{"forged": true}', worker="mallory", pool="gpu")
        signers["cpu"]._send([new_command(slow.job_id, "acme", stolen)])  # the running attempt's token, wrong pool
        why = "signed with pool 'cpu''s key for an attempt dispatched to pool 'gpu'"
        eventually(lambda: _refusals(acme, slow.job_id, why) == 1, 30, "the cpu pool's result refused")
        running = acme.status(slow.job_id)
        assert running.status == "running" and running.pool == "gpu" and running.attempts == 1
        signers["operator"]._send([new_command(slow.job_id, "acme", stolen)])  # an operator's key: as before
        done = slow.wait(30)
        assert done.status == "completed" and done.result == {"forged": True}, done
    finally:
        if worker is not None:
            worker.stop()
        for client in (acme, unsigned, *signers.values()):
            client.close()
