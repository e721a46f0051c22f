"""The console in Chromium, for what an operator does beyond reading: act on odd ids, page and group dead letters,
control task types, follow a running job's progress, search, and read long values without a page wider than the
window (issue 22, items 3, 10 and 11)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from playwright.sync_api import Page, expect

from engine.client import JobHandle
from engine.commands import now_us
from tests.integration.browser.pages import shown_after_reload, tenant
from tests.integration.browser.conftest import Stack
from tests.integration.conftest import eventually

Shoot = Callable[..., Path]



def submit_as(stack: Stack, job_id: str, task_type: str, payload: Any, owner: str,
              delay: float | None = None) -> JobHandle:
    """Submit a job with an id of our choosing (a service producing SubmitJob itself may pick any id)."""
    client = stack.client
    command = client._submit_command(job_id, str(uuid.uuid4()), now_us(), task_type, payload, owner, delay=delay)
    return client._send([command])[0]


def status(stack: Stack, job_id: str) -> str:
    return str(stack.client.status(job_id).status)


def event_types(stack: Stack, job_id: str) -> list[str]:
    return [type(logged.event.body).__name__ for logged in stack.client.status(job_id).events]


def shown(stack: Stack, job_id: str, state: str) -> bool:
    """Whether the catalog (what the console reads) lists the job in ``state``."""
    return any(r.job_id == job_id for r in stack.client.jobs(status=state, limit=1000).rows)


def test_an_id_with_dot_segments_is_acted_on_and_no_other(stack: Stack, page: Page) -> None:
    owner = tenant("initech")
    other = stack.client.submit("echo", {"n": 1}, tenant=owner, delay=3600)
    tricky = submit_as(stack, f"y/../{other.job_id}", "echo", {"n": 2}, owner, delay=3600).job_id
    eventually(lambda: shown(stack, tricky, "scheduled") and shown(stack, other.job_id, "scheduled"),
               what="both scheduled")
    page.on("dialog", lambda dialog: dialog.accept())

    page.goto(f"{stack.url}/jobs/{quote(tricky, safe='')}")
    expect(page.locator("#job-id")).to_have_text(tricky)
    page.locator("form#cancel button").click()
    expect(page.locator("#flash")).to_be_visible()
    eventually(lambda: status(stack, tricky) == "cancelled", what=f"{tricky} cancelled")
    assert status(stack, other.job_id) == "scheduled", "the cancel of y/../X acted on X"
    assert "CancelJob" not in " ".join(event_types(stack, other.job_id))

    dead_other = stack.client.submit("email.send", {}, tenant=owner)
    assert dead_other.wait(30).status == "dead"
    dead_tricky = submit_as(stack, f"y/../{dead_other.job_id}", "email.send", {}, owner).job_id
    eventually(lambda: shown(stack, dead_tricky, "dead"), what=f"{dead_tricky} dead")
    page.goto(f"{stack.url}/dlq?tenant={owner}")
    page.locator(f'#dlq-table tr[data-job-id="{dead_tricky}"] form.replay-one button').click()
    expect(page.locator("#flash")).to_be_visible()
    eventually(lambda: "JobReplayed" in event_types(stack, dead_tricky), what=f"{dead_tricky} replayed")
    assert "JobReplayed" not in event_types(stack, dead_other.job_id), "the replay of y/../X acted on X"


def test_dead_letters_come_a_page_at_a_time_grouped_by_error_and_purged_by_filter(
        stack: Stack, page: Page, shoot: Shoot) -> None:
    owner = tenant("dunder")
    bad = [{"task_type": "email.send", "payload": {}, "tenant": owner} for _ in range(44)]
    handles = stack.client.submit_many(bad)
    odd = stack.client.submit("flaky", {"fixed_when": str(stack.tmp / "never")}, tenant=owner)
    eventually(lambda: stack.client.jobs(tenant=owner, status="dead", limit=1).counts.get("dead") == 45, what="45 dead")
    assert odd.wait(30).status == "dead"

    page.goto(f"{stack.url}/dlq?tenant={owner}&limit=20")
    expect(page.locator("#dlq-count")).to_have_text("45 dead job(s)")
    rows = page.locator("#dlq-table tbody tr[data-job-id]")
    expect(rows).to_have_count(20)  # one page, not the whole queue
    expect(rows.first).to_have_attribute("data-job-id", odd.job_id)  # newest death first
    expect(page.locator("#dlq-pager .range")).to_have_text("1–20 of 45")
    groups = page.locator("#dlq-groups tbody tr[data-group]")
    expect(groups).to_have_count(2)
    expect(groups.first).to_have_attribute("data-count", "44")
    shoot(page, "dlq-groups")

    for step, shown_range in (("next", "21–40"), ("next", "41–45"), ("prev", "21–40"), ("first", "1–20")):
        page.locator(f"#dlq-pager a.{step}-page").click()
        expect(page.locator("#dlq-pager .range")).to_have_text(f"{shown_range} of 45")
    expect(page.locator("#dlq-pager a.prev-page")).to_have_count(0)

    groups.first.locator("a").click()  # the 44 of one error
    expect(page.locator("#dlq-error-filter")).to_be_visible()
    expect(page.locator("#dlq-count")).to_have_text("44 dead job(s)")
    page.locator("form#purge-filter input[name=reason]").fill("bad addresses")
    page.locator("form#purge-filter button").click()
    expect(page.locator("#purge-count")).to_have_text("44")  # it says how many before it sends any
    assert status(stack, handles[0].job_id) == "dead", "nothing is sent before the confirmation"
    page.locator("form#purge-confirm button").click()
    expect(page.locator("#done")).to_contain_text("44 job(s) purged")
    eventually(lambda: stack.client.jobs(tenant=owner, status="dead", limit=1).counts.get("dead") == 1,
               what="44 purged")
    assert status(stack, odd.job_id) == "dead", "a job of another error group was purged"

    page.goto(f"{stack.url}/dlq?tenant={owner}")  # the list follows the queue without a reload
    expect(page.locator("#dlq-count")).to_have_text("1 dead job(s)")
    page.evaluate("window.__same_page = true")
    stack.client.submit("email.send", {}, tenant=owner).wait(30)
    expect(page.locator("#dlq-count")).to_have_text("2 dead job(s)", timeout=15_000)
    assert page.evaluate("window.__same_page === true"), "the page was reloaded, not refreshed in place"


def test_a_running_job_shows_its_progress_labels_and_payload_and_cancel_asks_first(stack: Stack, page: Page) -> None:
    owner = tenant("vandelay")
    job = stack.client.submit("progressing", {"order": {"id": 7, "lines": [1, 2]}}, tenant=owner,
                              labels={"team": "billing"})
    eventually(lambda: shown(stack, job.job_id, "running"), what="running")
    page.goto(f"{stack.url}/jobs/{job.job_id}")
    expect(page.locator("#progress")).to_have_attribute("data-value", "0.75")  # the live part follows it
    expect(page.locator("#progress-message")).to_have_text("step 3 of 4")
    expect(page.locator("#running-for")).to_contain_text("running for")
    progressed = page.locator("#timeline tbody tr[data-type=JobProgressed]")
    expect(progressed).to_have_count(1)  # the reports (the engine may coalesce some), one row
    expect(progressed).to_have_attribute("data-reports", re.compile(r"^[2-9]$"))
    expect(page.locator("#labels .label[data-label=team]")).to_have_text("team=billing")
    assert '{\n  "order": {\n    "id": 7,' in page.locator("#payload").inner_text()
    times = page.locator("#job-live time.when")
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", t) for t in times.all_inner_texts())

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.locator("form#cancel button").click()
    eventually(lambda: bool(asked), what="a confirmation asked")
    assert job.job_id in asked[0]
    expect(page.locator("#flash")).to_have_count(0)  # not sent
    assert status(stack, job.job_id) == "running"
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("form#cancel button").click()
    expect(page.locator("#flash")).to_be_visible()
    eventually(lambda: status(stack, job.job_id) == "cancelled", what="cancelled once confirmed")


def test_pause_and_rate_limit_a_task_type_and_see_why_a_job_waits(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner = tenant("kramerica")
    page.on("dialog", lambda dialog: dialog.accept())
    stack.client.submit("otp", {"n": 0}, tenant=owner).wait(30)  # the catalog knows the task type
    row = shown_after_reload(page, f"{stack.url}/tasks", '#tasks-table tr[data-task-type="otp"]')
    row.locator("form.pause-task input[name=reason]").fill("provider outage")
    row.locator("form.pause-task button").click()
    expect(page.locator("#flash")).to_contain_text("paused")
    expect(row).to_have_attribute("data-paused", "true")
    expect(row.locator("td.state")).to_contain_text("provider outage")
    expect(row.locator("td.state")).to_contain_text("console@")  # who asked

    waiting = stack.client.submit("otp", {"n": 1}, tenant=owner)
    eventually(lambda: shown(stack, waiting.job_id, "queued"), what="queued behind the pause")
    page.goto(f"{stack.url}/jobs/{waiting.job_id}")
    expect(page.locator("#holdup")).to_contain_text("paused: task type otp is paused (provider outage)")

    page.goto(stack.url + "/")
    expect(page.locator("#paused-types")).to_contain_text("otp", timeout=15_000)

    page.goto(f"{stack.url}/tasks")
    row.locator("form.limit-task input[name=rate]").fill("120/m")
    row.locator("form.limit-task button").click()
    expect(row).to_have_attribute("data-rate", "2")
    expect(row.locator("td.limit")).to_contain_text("2/s")
    shoot(page, "tasks")
    row.locator("form.resume-task button").click()
    expect(row).to_have_attribute("data-paused", "false")
    assert waiting.wait(30).status == "completed"
    row.locator("form.unlimit-task button").click()
    expect(row.locator("td.limit")).to_contain_text("none")


def test_the_jobs_list_pages_both_ways_finds_ids_shows_rejections_and_stays_live(stack: Stack, page: Page) -> None:
    from engine.contract import messages as m

    owner = tenant("pendant")
    jobs = stack.client.submit_many([{"task_type": "echo", "payload": {"n": n}, "tenant": owner, "delay": 3600}
                                     for n in range(45)])
    eventually(lambda: stack.client.jobs(tenant=owner, limit=1).counts.get("scheduled") == 45, what="45 scheduled")
    page.goto(f"{stack.url}/jobs?tenant={owner}&status=scheduled&limit=20")
    pager = page.locator("#jobs-pager .range")
    expect(pager).to_have_text("1–20 of 45")
    expect(page.locator("#jobs-table tbody tr[data-job-id]")).to_have_count(20)
    for step, shown_range in (("next", "21–40"), ("next", "41–45"), ("prev", "21–40"), ("first", "1–20")):
        page.locator(f"#jobs-pager a.{step}-page").click()
        expect(pager).to_have_text(f"{shown_range} of 45")
    expect(page.locator("#jobs-pager a.prev-page")).to_have_count(0)

    page.evaluate("window.__same_page = true")
    stack.client.submit("echo", {"n": 121}, tenant=owner, delay=3600)
    expect(pager).to_have_text("1–20 of 46", timeout=15_000)  # the list follows without a reload
    assert page.evaluate("window.__same_page === true"), "the page was reloaded, not refreshed in place"

    wanted = jobs[7].job_id
    page.locator("form#jobs-search input[name=id]").fill(wanted[:13])
    page.locator("#jobs-search-submit").click()
    expect(page.locator(f'#jobs-table tr[data-job-id="{wanted}"]')).to_have_count(1)
    assert all(r.startswith(wanted[:13]) for r in page.locator("#jobs-table tr[data-job-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)"))

    refused = m.Command(str(uuid.uuid4()), str(uuid.uuid4()), owner, now_us(),
                        m.SubmitJob("echo", m.Payload(b"{}"), priority=42))
    stack.client._send([refused])
    page.goto(f"{stack.url}/jobs?tenant={owner}&status=rejected")
    row = page.locator(f'#jobs-table tr[data-job-id="{refused.job_id}"]')
    expect(row).to_have_attribute("data-status", "rejected")
    expect(row.locator("td.error")).to_contain_text("priority")


def test_long_values_wrap_and_no_page_is_wider_than_the_window(stack: Stack, page: Page, shoot: Shoot) -> None:
    long_tenant = "acme-" + "x" * 195
    dead = stack.client.submit("email.send", {"to": "y" * 300}, tenant=long_tenant,
                               labels={"team": "billing-" + "z" * 150})
    scheduled = stack.client.submit("echo", {"text": "w" * 400}, tenant=long_tenant, delay=3600)
    assert dead.wait(30).status == "dead"
    eventually(lambda: shown(stack, scheduled.job_id, "scheduled"), what="scheduled")
    for path in (f"/jobs?tenant={quote(long_tenant)}", f"/dlq?tenant={quote(long_tenant)}", "/tenants", "/tasks",
                 f"/jobs/{dead.job_id}", f"/jobs/{scheduled.job_id}"):
        page.goto(stack.url + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1280, f"{path} is {width} px wide"
    shoot(page, "job-long-values", full_page=True)


def test_the_overview_charts_each_task_types_throughput_and_failures(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner = tenant("sabre")
    assert stack.client.submit("echo", {"n": 1}, tenant=owner).wait(30).status == "completed"
    assert stack.client.submit("email.send", {}, tenant=owner).wait(30).status == "dead"
    echo = page.locator('#throughput figure[data-task-type="echo"] svg')
    failing = page.locator('#throughput figure[data-task-type="email.send"] svg rect.bar.dead title')

    def drawn() -> bool:  # reloaded until the view has folded both jobs (the page is drawn from it)
        page.goto(stack.url + "/")
        return echo.locator("rect.bar.ok").count() > 0 and failing.count() > 0

    eventually(drawn, 30, "both task types charted", every=0.5)
    expect(echo.locator("rect.bar.ok")).to_have_count(18 + 1, timeout=15_000)  # 3 h of 10 min, and the legend
    expect(echo.locator("rect.bar.ok title").last).to_contain_text(re.compile(r"[1-9]\d* succeeded"))
    expect(failing.last).to_contain_text(re.compile(r"[1-9]\d* dead-lettered"))
    shoot(page, "overview-throughput", full_page=True)


def test_a_waiting_jobs_page_links_what_it_waits_for_and_a_dependency_its_dependents(
        stack: Stack, page: Page, tmp_path: Path) -> None:
    owner = tenant("kramerica")
    gate = stack.client.submit("gated", {"open_when": str(tmp_path / "gate")}, tenant=owner)
    done = stack.client.submit("echo", {"n": 1}, tenant=owner)
    waiting = stack.client.submit("gather", {}, tenant=owner, depends_on=[gate, done])
    reported = lambda: stack.client.status(waiting.job_id).dependencies.get(done.job_id) == "completed"  # noqa: E731
    eventually(reported, 30, "one reported")
    eventually(lambda: stack.client.status(gate.job_id).dependents == [waiting.job_id], what="the dependent recorded")
    page.goto(f"{stack.url}/jobs/{waiting.job_id}")
    expect(page.locator("#job-status")).to_have_attribute("data-status", "waiting")
    expect(page.locator("#waits-for")).to_have_attribute("data-pending", "1")
    expect(page.locator(f"#waits-for tr[data-job='{done.job_id}']")).to_have_attribute("data-status", "completed")
    row = page.locator(f"#waits-for tr[data-job='{gate.job_id}']")
    expect(row).to_have_attribute("data-status", "pending")
    row.locator("a").click()
    expect(page.locator("#job-id")).to_have_text(gate.job_id)
    page.locator(f"#dependents a[data-job='{waiting.job_id}']").click()
    expect(page.locator("#job-id")).to_have_text(waiting.job_id)
    (tmp_path / "gate").touch()
    expect(page.locator("#job-status")).to_have_attribute("data-status", "completed", timeout=60_000)
    expect(page.locator(f"#waits-for tr[data-job='{gate.job_id}']")).to_have_attribute("data-status", "completed")
