"""The console in Chromium, for what an operator does beyond reading: act on odd ids, page and group dead letters,
control task types, follow a running job's progress, search, and read long values without a page wider than the
window (issue 22, items 3, 10 and 11)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from playwright.sync_api import Page, expect

from engine.client import JobHandle
from engine.commands import now_us
from tests.integration.browser.conftest import Stack

Shoot = Callable[..., Path]


def tenant(name: str) -> str:
    """A tenant name no other test (or earlier run) uses."""
    return f"{name}-{uuid.uuid4().hex[:4]}"


def submit_as(stack: Stack, job_id: str, task_type: str, payload: Any, owner: str,
              delay: float | None = None) -> JobHandle:
    """Submit a job with an id of our choosing (a service producing SubmitJob itself may pick any id)."""
    client = stack.client
    command = client._submit_command(job_id, str(uuid.uuid4()), now_us(), task_type, payload, owner, delay=delay)
    return client._send([command])[0]


def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Block until ``check()`` holds (polled), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.3)


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
    until(lambda: shown(stack, tricky, "scheduled") and shown(stack, other.job_id, "scheduled"), "both scheduled")
    page.on("dialog", lambda dialog: dialog.accept())

    page.goto(f"{stack.url}/jobs/{quote(tricky, safe='')}")
    expect(page.locator("#job-id")).to_have_text(tricky)
    page.locator("form#cancel button").click()
    expect(page.locator("#flash")).to_be_visible()
    until(lambda: status(stack, tricky) == "cancelled", f"{tricky} cancelled")
    assert status(stack, other.job_id) == "scheduled", "the cancel of y/../X acted on X"
    assert "CancelJob" not in " ".join(event_types(stack, other.job_id))

    dead_other = stack.client.submit("email.send", {}, tenant=owner)
    assert dead_other.wait(30).status == "dead"
    dead_tricky = submit_as(stack, f"y/../{dead_other.job_id}", "email.send", {}, owner).job_id
    until(lambda: shown(stack, dead_tricky, "dead"), f"{dead_tricky} dead")
    page.goto(f"{stack.url}/dlq?tenant={owner}")
    page.locator(f'#dlq-table tr[data-job-id="{dead_tricky}"] form.replay-one button').click()
    expect(page.locator("#flash")).to_be_visible()
    until(lambda: "JobReplayed" in event_types(stack, dead_tricky), f"{dead_tricky} replayed")
    assert "JobReplayed" not in event_types(stack, dead_other.job_id), "the replay of y/../X acted on X"
