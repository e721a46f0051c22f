"""The console in a real browser (headless Debian Chromium under Playwright), on a real engine and broker.

What an operator does: search a tenant's running jobs, open a job and read its retries on the
timeline, watch a running job's page follow it live (htmx), replay a dead-lettered job and watch
it complete, pause a schedule, read the tenants, workers and lateness pages, and the overview.
Each test asserts what the page shows (text, the stable selectors of docs/console.md) and leaves
a screenshot of its page in docs/console/.

The overview comes last so that its screenshot shows what the other tests did (it asserts only
what it seeds itself).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from engine.client import JobHandle
from tests.integration.browser.pages import shown_after_reload, tenant
from tests.integration.browser.conftest import VIEWPORT, ConsoleProcess, Stack
from tests.integration.conftest import eventually

Shoot = Callable[..., Path]




def wait_status(stack: Stack, handle: JobHandle, status: str, timeout: float = 30.0) -> None:
    """Block until the catalog lists the job with ``status``."""
    eventually(lambda: any(r.job_id == handle.job_id for r in stack.client.jobs(status=status, limit=1000).rows),
               timeout, f"job {handle.job_id} {status}")


def test_search_a_tenants_running_jobs(stack: Stack, page: Page, shoot: Shoot) -> None:
    acme, globex = tenant("acme"), tenant("globex")
    running = [stack.client.submit("patient", {"seconds": 60}, tenant=acme) for _ in range(2)]
    elsewhere = stack.client.submit("patient", {"seconds": 60}, tenant=globex)
    finished = stack.client.submit("echo", {"n": 1}, tenant=acme)
    assert finished.wait(30).status == "completed"
    for handle in (*running, elsewhere):
        wait_status(stack, handle, "running")

    page.goto(stack.url + "/jobs")
    search = page.locator("form#jobs-search")
    search.locator("input[name=tenant]").fill(acme)
    search.locator("select[name=status]").select_option("running")
    page.locator("#jobs-search-submit").click()

    expect(page).to_have_url(re.compile(rf"tenant={acme}.*status=running|status=running.*tenant={acme}"))
    rows = page.locator("#jobs-table tbody tr[data-job-id]")
    expect(rows).to_have_count(2)
    for handle in running:
        row = page.locator(f'#jobs-table tr[data-job-id="{handle.job_id}"]')
        expect(row).to_have_attribute("data-status", "running")
        expect(row).to_have_attribute("data-tenant", acme)
        expect(row.locator("td").nth(3)).to_have_text("patient")
    expect(page.locator(f'tr[data-job-id="{elsewhere.job_id}"]')).to_have_count(0)
    expect(page.locator(f'tr[data-job-id="{finished.job_id}"]')).to_have_count(0)
    expect(page.locator("#status-counts a[data-status=running] .count")).to_have_text("2")
    expect(page.locator("#status-counts a[data-status=completed] .count")).to_have_text("1")
    shoot(page, "jobs")


def test_open_a_job_and_see_its_retries_on_the_timeline(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner = tenant("initech")
    job = stack.client.submit("shaky", {"order": 1042}, tenant=owner)
    assert job.wait(30).status == "completed"
    wait_status(stack, job, "completed")

    page.goto(f"{stack.url}/jobs?tenant={owner}")
    page.locator(f'#jobs-table tr[data-job-id="{job.job_id}"] a.job-link').click()

    expect(page.locator("#job-id")).to_have_text(job.job_id)
    expect(page.locator("#job-status")).to_have_attribute("data-status", "completed")
    expect(page.locator("#attempts")).to_contain_text("3 of 4")
    failures = page.locator("#timeline tbody tr[data-type=JobFailed]")
    expect(failures).to_have_count(2)
    for attempt in (1, 2):
        failed = page.locator(f"#timeline tbody tr[data-type=JobFailed][data-attempt='{attempt}']")
        expect(failed.locator("td.detail")).to_contain_text(f"upstream timed out (attempt {attempt})")
        expect(failed).to_have_attribute("data-fenced", "false")
    retries = page.locator("#timeline tbody tr[data-type=JobRetryScheduled]")
    expect(retries).to_have_count(2)
    expect(retries.first.locator("td.detail")).to_contain_text(re.compile(r"due 20\d\d-\d\d-\d\d "))
    expect(page.locator("#timeline tbody tr[data-type=JobSucceeded]")).to_have_count(1)
    expect(page.locator("#timeline tbody tr[data-type=JobSucceeded] td").nth(4)).to_have_text("engine-a")
    expect(page.locator("#payload")).to_contain_text("1042")
    expect(page.locator("#result")).to_contain_text(re.compile(r'"attempt":\s*3'))
    shoot(page, "job", full_page=True)


def test_a_running_jobs_page_follows_it_without_a_reload(stack: Stack, page: Page) -> None:
    owner = tenant("cyberdyne")
    job = stack.client.submit("patient", {"seconds": 60}, tenant=owner)
    wait_status(stack, job, "running")
    page.goto(f"{stack.url}/jobs/{job.job_id}")
    expect(page.locator("#job-status")).to_have_attribute("data-status", "running")
    expect(page.locator("#job-live")).to_have_attribute("data-final", "false")
    expect(page.locator("form#cancel")).to_be_visible()
    page.evaluate("window.__epochq_same_page = true")  # a reload or a navigation would drop it

    stack.client.cancel(job.job_id, tenant=owner, reason="stopped from the test", requested_by="ops-alice")

    expect(page.locator("#job-status")).to_have_attribute("data-status", "cancelled")  # htmx, every 2 s
    expect(page.locator("#job-live")).to_have_attribute("data-final", "true")
    cancelled = page.locator("#timeline tbody tr[data-type=JobCancelled] td.detail")
    expect(cancelled).to_contain_text("stopped from the test (by ops-alice)")
    expect(page.locator("form#cancel")).to_have_count(0)  # the actions follow the job once it is final
    assert page.evaluate("window.__epochq_same_page === true"), "the page was reloaded, not refreshed in place"


def test_replay_a_dead_lettered_job_and_see_it_complete(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner, fix = tenant("hooli"), stack.tmp / f"fixed-{uuid.uuid4().hex[:6]}"
    job = stack.client.submit("flaky", {"fixed_when": str(fix)}, tenant=owner)
    assert job.wait(30).status == "dead"

    row_selector = f'#dlq-table tr[data-job-id="{job.job_id}"]'
    row = shown_after_reload(page, f"{stack.url}/dlq?tenant={owner}", row_selector)
    expect(page.locator("#dlq-count")).to_have_text("1 dead job(s)")
    expect(row).to_have_attribute("data-task-type", "flaky")
    errors = row.locator("details.attempt-errors")
    errors.locator("> summary").click()
    expect(errors.locator("li[data-attempt]")).to_have_count(4)
    expect(errors.locator("li[data-attempt='4']")).to_contain_text("downstream unavailable (attempt 4)")
    shoot(page, "dlq")

    fix.touch()  # the receiver is fixed: the replayed attempt succeeds
    row.locator("form.replay-one button").click()
    expect(page.locator("#flash")).to_be_visible()

    shown_after_reload(page, f"{stack.url}/jobs/{job.job_id}", "#job-status[data-status=completed]")
    expect(page.locator("#attempts")).to_contain_text("1 replay(s)")
    replayed = page.locator("#timeline tbody tr[data-type=JobReplayed]")
    expect(replayed).to_have_count(1)
    expect(replayed.locator("td.detail")).to_contain_text(re.compile(r"replayed from the console \(by console@\S+\)"))
    expect(page.locator("#result")).to_contain_text(re.compile(r'"fixed":\s*true'))
    assert stack.client.status(job.job_id).status == "completed"
    shoot(page, "job-replayed", full_page=True)


def test_replay_the_dead_letters_of_a_filter_after_its_confirmation(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner, fix = tenant("soylent"), stack.tmp / f"fixed-{uuid.uuid4().hex[:6]}"
    jobs = [stack.client.submit("flaky", {"fixed_when": str(fix), "n": n}, tenant=owner) for n in range(2)]
    assert [h.wait(30).status for h in jobs] == ["dead", "dead"]

    shown_after_reload(page, f"{stack.url}/dlq?tenant={owner}", "#dlq-table tr[data-job-id]")
    expect(page.locator("#dlq-table tr[data-job-id]")).to_have_count(2)
    page.locator("form#replay-filter input[name=reason]").fill("receiver fixed")
    page.locator("form#replay-filter button").click()

    expect(page.locator("#replay-count")).to_have_text("2")  # it says how many before it sends any
    expect(page.locator("#replay-question")).to_contain_text(f"tenant={owner}")
    shoot(page, "dlq-confirm")
    assert [stack.client.status(h.job_id).status for h in jobs] == ["dead", "dead"], "nothing is sent before"
    fix.touch()
    page.locator("form#replay-confirm button").click()

    expect(page.locator("#done")).to_have_text("2 job(s) sent for replay")
    shown_after_reload(page, f"{stack.url}/jobs?tenant={owner}&status=completed",
                       "#status-counts a[data-status=completed] .count:text-is('2')")
    expect(page.locator("#status-counts a[data-status=dead] .count")).to_have_text("0")


def test_pause_a_schedule(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner, schedule_id = tenant("umbrella"), f"nightly-report-{uuid.uuid4().hex[:4]}"
    receipt = stack.client.add_schedule(schedule_id, "echo", "0 3 * * *", tenant=owner, timezone="Europe/Paris",
                                        payload={"report": "nightly"})
    assert receipt.accepted, receipt.reason

    row_selector = f'#schedules-table tr[data-schedule-id="{schedule_id}"]'
    row = shown_after_reload(page, stack.url + "/schedules", row_selector)
    expect(row).to_have_attribute("data-enabled", "true")
    expect(row.locator("td.state")).to_have_text("enabled")
    expect(row.locator(".next-local").first).to_contain_text("03:00")
    expect(row.locator(".next-utc").first).to_contain_text(re.compile(r"0[12]:00"))  # 3:00 Paris: 02:00 or 01:00 UTC
    row.locator("form.pause-schedule button").click()

    expect(page.locator("#flash")).to_be_visible()
    paused = shown_after_reload(page, stack.url + "/schedules", row_selector + "[data-enabled=false]")
    expect(paused.locator("td.state")).to_have_text("paused")
    expect(paused.locator("form.resume-schedule button")).to_be_visible()
    view = stack.client.schedule(schedule_id)
    assert view is not None and not view.enabled
    shoot(page, "schedules")


def test_a_console_with_a_token_asks_for_it_and_records_who_acted(stack: Stack, browser: Browser) -> None:
    token = f"tok-{uuid.uuid4().hex[:12]}"
    console = ConsoleProcess(stack.settings, stack.engine.state_dir, stack.tmp, extra=("--token", token))
    anonymous = browser.new_context(viewport=VIEWPORT)
    alice = browser.new_context(viewport=VIEWPORT, http_credentials={"username": "alice", "password": token})
    try:
        console.wait_ready()
        refused = anonymous.request.get(console.url + "/jobs")  # a page would stop at the browser's login prompt
        assert refused.status == 401 and "Basic" in refused.headers.get("www-authenticate", "")

        owner = tenant("tyrell")
        job = stack.client.submit("patient", {"seconds": 60}, tenant=owner)
        wait_status(stack, job, "running")
        page = alice.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # cancel asks first
        page.goto(f"{console.url}/jobs/{job.job_id}")
        page.locator("form#cancel input[name=reason]").fill("wrong customer")
        page.locator("form#cancel button").click()

        expect(page.locator("#job-status")).to_have_attribute("data-status", "cancelled")
        cancelled = page.locator("#timeline tbody tr[data-type=JobCancelled] td.detail")
        expect(cancelled).to_contain_text("wrong customer (by alice)")
    finally:
        anonymous.close()
        alice.close()
        console.stop()


def test_tenants_workers_and_lateness_pages(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner = tenant("stark")
    done = [stack.client.submit("echo", {"n": n}, tenant=owner) for n in range(3)]
    assert [h.wait(30).status for h in done] == ["completed"] * 3
    for handle in done:
        wait_status(stack, handle, "completed")

    tenant_row = shown_after_reload(page, stack.url + "/tenants", f'#tenants-table tr[data-tenant="{owner}"]')
    expect(tenant_row.locator("td.weight")).to_have_text(re.compile(r"\d"))
    expect(page.locator("#share-charts figure.share-chart svg.chart").first).to_be_visible()
    shoot(page, "tenants")

    worker = shown_after_reload(page, stack.url + "/workers", 'tr.worker[data-instance="engine-a"]')
    expect(worker).to_have_attribute("data-lost", "false")
    expect(worker.locator("li[data-partition]")).to_have_count(3)
    shoot(page, "workers")

    page.goto(stack.url + "/lateness?window=15m")
    expect(page.locator("#lateness-table tr[data-task-type=echo]")).to_be_visible()
    expect(page.locator("figure.histogram[data-task-type=echo] svg.chart")).to_be_visible()
    shoot(page, "lateness")


def test_the_overview(stack: Stack, page: Page, shoot: Shoot) -> None:
    owner = tenant("wayne")
    done = [stack.client.submit("echo", {"n": n}, tenant=owner) for n in range(5)]
    assert [h.wait(30).status for h in done] == ["completed"] * 5

    page.goto(stack.url + "/")
    expect(page.locator("body")).to_have_attribute("data-page", "overview")
    active = page.locator("#partitions-table tr[data-partition][data-phase=active]")
    expect(active).to_have_count(3)
    expect(active.first).to_contain_text("engine-a")
    succeeded = page.locator("#recent-table tr[data-task-type=echo] td.succeeded")
    expect(succeeded).to_have_text(re.compile(r"^\s*([5-9]|\d\d+)\s*$"), timeout=30_000)  # the live part refreshes
    expect(page.locator("#no-open-breakers")).to_be_visible()
    shoot(page, "overview")
