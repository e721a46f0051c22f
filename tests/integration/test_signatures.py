"""Tenant identity on commands, on a real broker: with signatures required, an engine runs a job
its tenant signed, rejects an unsigned submit and a submit signed with another tenant's key, and
refuses another tenant's cancel of an existing job; its own commands (scoped fan-out) pass.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engine.client import Client
from engine.config import Settings
from engine.runtime.tenants import TenantDirectory, set_tenant
from tests.integration.conftest import EngineProcess


def key_files(tmp: Path, name: str) -> tuple[Path, Path]:
    """A fresh Ed25519 key pair as PEM files (private, public), as `openssl genpkey` would write them."""
    key = Ed25519PrivateKey.generate()
    private, public = tmp / f"{name}.key", tmp / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_an_engine_requiring_signatures_runs_only_what_the_tenant_signed(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.contract.signing import load_public_key

    acme_key, acme_pub = key_files(tmp_path, "acme")
    globex_key, globex_pub = key_files(tmp_path, "globex")
    engine_key, _ = key_files(tmp_path, "engine")
    set_tenant(settings, "acme", 1.0, product="shop", public_keys=[load_public_key(acme_pub)])
    set_tenant(settings, "globex", 1.0, product="shop", public_keys=[load_public_key(globex_pub)])
    set_tenant(settings, "acme", 2.0, product="shop")  # a new weight keeps the tenant's key
    with TenantDirectory(settings) as table:
        assert table.public_keys("acme") == (load_public_key(acme_pub),) and table.weight("acme") == 2.0
    monkeypatch.setenv("EPOCHQ_REQUIRE_SIGNATURES", "true")
    monkeypatch.setenv("EPOCHQ_ENGINE_KEY_FILE", str(engine_key))
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
        _wait_for(lambda: acme.status(later.job_id).status == "scheduled")
        mallory.cancel(later.job_id, tenant="acme", reason="mallory")
        unsigned.cancel(later.job_id, tenant="acme", reason="anyone")
        refused = _wait_for(lambda: _refusals(acme, later.job_id) >= 2)
        assert refused and acme.status(later.job_id).status == "scheduled"
        mallory.cancel(later.job_id, tenant="globex", reason="as myself")  # signed, but not globex's job
        assert _wait_for(lambda: _refusals(acme, later.job_id, "tenant: job") >= 1)
        assert acme.status(later.job_id).status == "scheduled"
        acme.cancel(later.job_id, tenant="acme", reason="changed my mind")
        assert _wait_for(lambda: acme.status(later.job_id).status == "cancelled")

        fanned = acme.submit("echo", {"n": 4}, tenant="acme", scope="product:shop").wait(60)
        assert fanned.done and {c["status"] for c in fanned.children.values()} == {"completed"}, fanned
        assert set(fanned.children) == {"acme", "globex"}  # children sent (and signed) by the engine
        for client in (acme, unsigned, mallory):
            client.close()
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]
    assert "unauthenticated command" in engine.logs()


def _refusals(client: Client, job_id: str, why: str = "unauthenticated") -> int:
    return sum(1 for e in client.status(job_id).events
               if e.event.type == "CommandRefused" and why in e.event.body.reason)


def _wait_for(check, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_a_command_acts_only_within_its_tenant_even_unsigned(settings: Settings, client: Client, engines,  # type: ignore[no-untyped-def]
                                                              tmp_path: Path) -> None:
    from tests.integration.conftest import start_engine

    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    later = client.submit("echo", {}, tenant="acme", delay=60)
    assert _wait_for(lambda: client.status(later.job_id).status == "scheduled")
    client.cancel(later.job_id, tenant="globex", reason="not mine")
    client.cancel(later.job_id, tenant="", reason="no tenant at all")  # an empty tenant, sent as it is
    assert _wait_for(lambda: _refusals(client, later.job_id, "tenant: job") >= 2)
    refusals = [e.event for e in client.status(later.job_id).events if e.event.type == "CommandRefused"]
    assert all(e.tenant_id == "acme" for e in refusals)  # recorded in acme's history, for its audit
    assert client.status(later.job_id).status == "scheduled"
    assert client.cancel(later.job_id, tenant="acme").wait(10).status == "cancelled"
