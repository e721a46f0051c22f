"""A refusal is never success, on a real broker: a task type's pause, resume or rate limit signed with a tenant's
key is refused by every partition, and the CLI says so on stderr and exits 1 (not "already paused", exit 0)."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from engine.client import Client
from engine.config import Settings
from engine.console.app import create_app
from engine.runtime.tenants import set_tenant
from tests.integration.conftest import EngineProcess, start_engine
from tests.integration.helpers.cli import epochq
from tests.integration.helpers.keys import key_files

REFUSED = ("refused in 3 of 3 partition(s): unauthenticated: pause/resume/limits are operator commands; a tenant's "
           "key may not sign them, only an operator key may (EPOCHQ_OPERATOR_KEY_FILE; docs/security.md)")
"""A task type's command names no tenant, so a tenant's signature proves nothing for it (docs/security.md); the
refusal says so, not that the key is not one of tenant ''s."""


def test_task_type_controls_signed_with_a_tenants_key_say_refused_and_exit_1(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.contract.signing import load_public_key

    acme_key, acme_pub = key_files(tmp_path, "acme")
    engine_key, _ = key_files(tmp_path, "engine")
    set_tenant(settings, "acme", 1.0, public_keys=[load_public_key(acme_pub)])
    monkeypatch.setenv("EPOCHQ_REQUIRE_SIGNATURES", "true")
    monkeypatch.setenv("EPOCHQ_ENGINE_KEY_FILE", str(engine_key))
    engine = EngineProcess(settings, "refusals", tmp_path)
    try:
        engine.wait_active(3)
        monkeypatch.delenv("EPOCHQ_ENGINE_KEY_FILE")
        monkeypatch.delenv("EPOCHQ_REQUIRE_SIGNATURES")
        monkeypatch.setenv("EPOCHQ_SIGNING_KEY_FILE", str(acme_key))  # the CLI signs as tenant acme

        paused = epochq(settings, "pause", "echo", "--reason", "try")
        assert paused.returncode == 1, paused
        assert paused.stdout.strip() == "task type echo paused in 0 of 3 partition(s)", paused.stdout
        assert "already" not in paused.stdout
        line = paused.stderr.strip().splitlines()[-1]
        assert line == f"epochq: pause echo: {REFUSED}", paused.stderr

        resumed = epochq(settings, "resume", "echo")
        assert resumed.returncode == 1 and f"epochq: resume echo: {REFUSED}" in resumed.stderr, resumed
        limited = epochq(settings, "limits", "set", "echo", "--rate", "5/s")
        assert limited.returncode == 1 and "in 0 of 3 partition(s)" in limited.stdout, limited
        assert "had this limit already" not in limited.stdout
        assert f"epochq: limits set echo: {REFUSED}" in limited.stderr, limited.stderr
        cleared = epochq(settings, "limits", "clear", "echo")
        assert cleared.returncode == 1 and "had none" not in cleared.stdout, cleared
        assert f"epochq: limits clear echo: {REFUSED}" in cleared.stderr
    finally:
        assert engine.stop() == 0, engine.logs()[-3000:]


def test_console_actions_show_a_refusal_as_an_error(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.contract.signing import load_public_key

    acme_key, acme_pub = key_files(tmp_path, "acme")
    engine_key, _ = key_files(tmp_path, "engine")
    set_tenant(settings, "acme", 1.0, public_keys=[load_public_key(acme_pub)])
    monkeypatch.setenv("EPOCHQ_REQUIRE_SIGNATURES", "true")
    monkeypatch.setenv("EPOCHQ_ENGINE_KEY_FILE", str(engine_key))
    engine = start_engine(engines, settings, "console", tmp_path)
    engine.wait_active(3)
    monkeypatch.delenv("EPOCHQ_ENGINE_KEY_FILE")
    monkeypatch.delenv("EPOCHQ_REQUIRE_SIGNATURES")
    acme = Client(settings.model_copy(update={"signing_key_file": acme_key}))
    done = acme.submit("noop", {}, tenant="acme").wait(30)
    assert done.status == "completed", done
    acme.close()

    signed = settings.model_copy(update={"signing_key_file": acme_key, "state_dir": engine.state_dir})
    app = create_app(signed)  # a console whose commands are signed with a tenant's key
    try:
        with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as web:
            web.get("/")
            token = web.cookies.get("epochq_csrf")
            paused = web.post("/actions/tasks/echo/pause", data={"csrf_token": token, "reason": "try"})
            assert paused.status_code == 403, paused.text
            assert f"pause of task type echo: {REFUSED}" in html.unescape(paused.text), paused.text
            late = web.post(f"/actions/jobs/{done.job_id}/cancel", data={"csrf_token": token})
            assert late.status_code == 409, late.text
            assert f"cancel of job {done.job_id} refused: CancelJob refused in state completed: " \
                in html.unescape(late.text), late.text
    finally:
        app.state.reads.close()
