"""The console against a real broker and a real engine: served by ``engine run --console-port``, over HTTP.

What a person does in it: read the overview, search a tenant's jobs, open a dead-lettered job and
see its retries on the timeline, replay it (refused without the CSRF token) and see it complete,
cancel a running job, replay the dead-letter queue by filter after its confirmation, pause a
schedule, set a tenant's weight; and a read-only console refusing all of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

from engine.client import Client
from engine.config import Settings
from engine.console.app import create_app
from engine.console.security import ConsoleAccess
from engine.contract import messages as m
from engine.runtime.tenants import TenantDirectory
from tests.integration.conftest import EngineProcess, eventually, start_engine
from tests.integration.helpers.ports import free_port


def csrf(page: str, form: str) -> str:
    """The CSRF token in the form ``form`` (an id or class) of ``page``."""
    found = re.search(rf'<form[^>]*(?:id|class)="{form}"[^>]*>\s*<input type="hidden" name="csrf_token" '
                      r'value="([^"]+)"', page)
    assert found, f"no form {form} with a CSRF token"
    return found.group(1)


def cell(page: str, row: str, column: str) -> int:
    """The number in ``td.column`` of the row whose attributes include ``row``."""
    found = re.search(rf'<tr {row}>.*?<td class="{column}">(\d+)</td>', page, re.S)
    assert found, f"no {column} in row {row}"
    return int(found.group(1))


@pytest.fixture
def console(settings: Settings, engines: list[EngineProcess], tmp_path: Path) -> Iterator[
        tuple[EngineProcess, httpx.Client]]:
    """An engine serving the console on a free port, and an HTTP client of it (a browser's cookie jar)."""
    port = free_port()
    engine = start_engine(engines, settings, "console", tmp_path, extra=("--console-port", str(port)))
    engine.wait_active(3)
    assert f"console on http://127.0.0.1:{port}/" in engine.logs()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, follow_redirects=False) as web:
        yield engine, web


def test_an_operator_reads_the_overview_searches_opens_a_dead_job_and_replays_it(
        settings: Settings, client: Client, console: tuple[EngineProcess, httpx.Client], tmp_path: Path) -> None:
    engine, web = console
    fixed = tmp_path / "fixed"
    done = client.wait_all([client.submit("noop", {}, tenant="acme") for _ in range(3)], 30)
    assert {o.status for o in done} == {"completed"}
    flaky = client.submit("flaky", {"fixed_when": str(fixed)}, tenant="beta")
    assert flaky.wait(30).status == "dead"

    overview = web.get("/").text  # the overview: the last 15 minutes from the log, figures from the catalog
    assert cell(overview, 'data-task-type="noop"', "succeeded") == 3
    assert cell(overview, 'data-task-type="flaky"', "failed") == 4
    assert cell(overview, 'data-task-type="flaky"', "dead") == 1
    # The chart counts each job once, when it ends: four failed attempts and a dead letter are one dead job.
    assert re.search(r'<figure class="throughput" data-task-type="flaky" data-succeeded="0" data-dead="1">', overview)
    assert re.search(r'<figure class="throughput" data-task-type="noop" data-succeeded="3" data-dead="0">', overview)
    assert re.search(r'id="dlq-depth"[^>]*><a href="/dlq">1<', overview)

    jobs = web.get("/jobs", params={"tenant": "acme", "status": "completed"}).text
    assert len(re.findall(r'<tr data-job-id="[^"]+" data-status="completed" data-tenant="acme">', jobs)) == 3
    assert re.search(r'data-status="completed"[^>]*>completed <span class="count">3<', jobs)
    assert 'data-tenant="beta"' not in jobs

    page = web.get(f"/jobs/{flaky.job_id}").text  # the dead job: its retries on the timeline
    assert 'id="job-status" data-status="dead"' in page
    assert [int(a) for a in re.findall(r'<tr data-type="JobFailed" data-attempt="(\d)"', page)] == [1, 2, 3, 4]
    assert "ConnectionError: downstream unavailable (attempt 4)" in page
    shown = r'<details class="attempt-error" data-attempt="(\d)"[^>]*>.*?<pre class="traceback">(.*?)</pre>'
    tracebacks = re.findall(shown, page, re.S)  # each attempt's traceback, as the worker sent it
    assert [a for a, _ in tracebacks] == ["1", "2", "3", "4"]
    assert all("in flaky" in tb and "ConnectionError: downstream unavailable" in tb for _, tb in tracebacks)
    token = csrf(page, "replay")

    refused = web.post(f"/actions/jobs/{flaky.job_id}/replay", data={"reason": "no token"})
    assert refused.status_code == 403
    fixed.touch()
    replayed = web.post(f"/actions/jobs/{flaky.job_id}/replay", data={"csrf_token": token, "reason": "fixed"})
    assert replayed.status_code == 303 and replayed.headers["location"] == f"/jobs/{flaky.job_id}?flash=replay"
    outcome = eventually(lambda: (o := client.status(flaky.job_id)).status == "completed" and o, 30, "replayed")
    replay = [e.event.body for e in outcome.events if isinstance(e.event.body, m.JobReplayed)]  # type: ignore
    assert replay[0].requested_by.startswith("console@") and replay[0].reason == "fixed"
    live = eventually(lambda: 'data-status="completed"' in (t := web.get(f"/live/jobs/{flaky.job_id}").text) and t,
                      15, "the job's live part says completed")
    assert 'data-final="true"' in str(live) and "hx-get" not in str(live)  # a final job stops refreshing
    assert "Replay sent" in web.get(f"/jobs/{flaky.job_id}?flash=replay").text
    eventually(lambda: cell(web.get("/overview/live").text, 'data-task-type="flaky"', "succeeded") == 1, 15,
               "the overview's window followed the log past its first read")
    assert cell(web.get("/overview/live").text, 'data-task-type="noop"', "succeeded") == 3  # counted once

    owned = eventually(lambda: len(re.findall(r'<tr data-partition="\d" data-phase="active">', t := web.get("/").text))
                       == 3 and t, 20, "the engine's heartbeat on the overview")
    owner = '<span class="v" title="console">console</span>'  # the engine's --owner-id, whole in its tooltip
    assert str(owned).count(owner) == 3  # each partition's owner
    lateness = web.get("/lateness", params={"window": "15m"}).text
    assert '<figure class="histogram" data-task-type="noop">' in lateness and "<svg" in lateness
    assert web.get("/jobs/not-a-job").status_code == 404
    assert web.get("/workers").status_code == 200


def test_cancel_replay_by_filter_pause_a_schedule_and_set_a_weight(
        settings: Settings, client: Client, console: tuple[EngineProcess, httpx.Client], tmp_path: Path) -> None:
    engine, web = console
    patient = client.submit("patient", {"seconds": 60}, tenant="acme")
    assert patient.wait(30, until=lambda o: o.status == "running").status == "running"
    page = eventually(lambda: 'form id="cancel"' in (t := web.get(f"/jobs/{patient.job_id}").text) and t, 15)
    assert f'hx-get="/live/jobs/{patient.job_id}" hx-trigger="every 2s"' in str(page)
    cancelled = web.post(f"/actions/jobs/{patient.job_id}/cancel",
                         data={"csrf_token": csrf(str(page), "cancel"), "reason": "not needed"})
    assert cancelled.status_code == 303
    assert patient.wait(30).status == "cancelled"

    dead = [client.submit("flaky", {"fixed_when": str(tmp_path / "never")}, tenant=t) for t in ("x", "y")]
    assert {o.status for o in client.wait_all(dead, 30)} == {"dead"}
    dlq = eventually(lambda: (t := web.get("/dlq", params={"tenant": "x"}).text).count('class="replay-one"') == 1
                     and t, 15, "dlq page")
    token = csrf(str(dlq), "replay-filter")
    ask = web.post("/actions/dlq/replay", data={"csrf_token": token, "tenant": "x", "reason": "retry"})
    assert ask.status_code == 200 and re.search(r'id="replay-count">1<', ask.text)
    assert client.status(dead[0].job_id).status == "dead"  # asking sent nothing
    sent = web.post("/actions/dlq/replay", data={"csrf_token": token, "tenant": "x", "confirm": "1",
                                                  "reason": "retry"})
    assert "1 job(s) sent for replay" in sent.text
    eventually(lambda: any(isinstance(e.event.body, m.JobReplayed) for e in client.status(dead[0].job_id).events),
               15, "replayed by filter")
    assert not any(isinstance(e.event.body, m.JobReplayed) for e in client.status(dead[1].job_id).events)

    assert client.add_schedule("tick", "noop", "0 3 * * *", tenant="acme", timezone="Europe/Paris").accepted
    schedules = eventually(lambda: 'data-schedule-id="tick" data-enabled="true"' in (t := web.get("/schedules").text)
                           and t, 15, "schedule listed")
    assert str(schedules).count('class="next-utc"') == 5 and "03:00:00.000 CET" in str(schedules)
    assert client.add_schedule("often", "noop", "* * * * * */2", tenant="acme").accepted  # every 2 s (seconds last)
    runs = eventually(lambda: re.findall(r'<li class="run" data-job-id="[^"]+" data-status="completed">',
                                         re.split(r'<tr data-schedule-id="', web.get("/schedules").text)[1]), 20,
                      "a finished run of the schedule 'often' on its row")  # rows are by id: 'often' is first
    assert runs
    paused = web.post("/actions/schedules/tick/pause", data={"csrf_token": csrf(str(schedules), "pause-schedule")})
    assert paused.status_code == 303 and paused.headers["location"] == "/schedules?flash=paused"
    eventually(lambda: 'data-schedule-id="tick" data-enabled="false"' in web.get("/schedules").text, 15, "paused")
    # A schedule whose task type is paused fires, but every occurrence waits: it is shown paused, not healthy.
    assert client.add_schedule("held", "slow", "0 4 * * *", tenant="acme").accepted
    eventually(lambda: 'data-schedule-id="held" data-enabled="true" data-state="enabled"' in web.get("/schedules").text,
               15, "listed enabled")
    assert all(o.events for o in client.pause_task_type("slow", reason="maintenance"))
    held = eventually(lambda: re.search(r'<tr data-schedule-id="held" data-enabled="true" data-state="task-paused">'
                                        r'.*?<td class="state">(.*?)</td>', web.get("/schedules").text, re.S), 15,
                      "shown paused by its task type")
    assert ">paused<" in held.group(1) and "task type <a" in held.group(1)

    tenants = web.get("/tenants").text
    weight = web.post("/actions/tenants/acme/weight", data={"csrf_token": csrf(tenants, "set-weight"), "weight": "3"})
    assert weight.status_code == 303
    with TenantDirectory(settings) as directory:
        assert directory.weight("acme") == 3.0
    assert re.search(r'<tr data-tenant="acme">.*?<td class="weight">3', web.get("/tenants").text, re.S)


def test_a_read_only_console_over_a_live_state_directory_shows_and_refuses(
        settings: Settings, client: Client, console: tuple[EngineProcess, httpx.Client]) -> None:
    engine, _ = console
    flaky = client.submit("flaky", {"fixed_when": "/nonexistent/never"}, tenant="acme")
    assert flaky.wait(30).status == "dead"
    app = create_app(engine.settings(settings), ConsoleAccess(read_only=True))
    with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as ro:
        page = eventually(lambda: 'data-status="dead"' in (t := ro.get(f"/jobs/{flaky.job_id}").text) and t, 15)
        assert "<form" not in str(page).split("</header>")[1].replace('<form id="jobs-search"', "")
        token = ro.cookies.get("epochq_csrf")
        assert ro.post(f"/actions/jobs/{flaky.job_id}/replay", data={"csrf_token": token}).status_code == 403
    app.state.reads.close()
    assert client.status(flaky.job_id).status == "dead"


def test_a_console_without_the_jobs_store_cancels_by_the_tenant_in_the_log(
        settings: Settings, client: Client, console: tuple[EngineProcess, httpx.Client], tmp_path: Path) -> None:
    later = client.submit("noop", {}, tenant="acme", delay=3600)
    assert later.wait(30, until=lambda o: o.status == "scheduled").status == "scheduled"
    app = create_app(settings.model_copy(update={"state_dir": tmp_path / "elsewhere"}))  # no store of any partition
    with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as web:
        assert "no view in" in web.get("/").text
        token = web.cookies.get("epochq_csrf")
        sent = web.post(f"/actions/jobs/{later.job_id}/cancel", data={"csrf_token": token, "reason": "not needed"})
        assert sent.status_code == 303, sent.text
        missing = web.post("/actions/jobs/no-such-job/cancel", data={"csrf_token": token})
        assert missing.status_code == 400 and "nor in the log" in missing.text
    app.state.reads.close()
    assert later.wait(30).status == "cancelled"
