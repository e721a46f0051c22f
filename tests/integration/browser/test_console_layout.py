"""Every page of the console at 1,280 px with the longest values admitted and a thousand rows: no page is wider
than the window, and no status word, time or short value breaks mid-word (issue 32 item 12: "runnin g",
"invoic e.rend er", a lateness page 2,028 px wide).

Names (tenant, task type, schedule id) are admitted up to 200 characters, messages and labels longer: each is
used at its longest, as one word with no place to break, which is what stretches a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from tests.integration.apps import LONG_TASK_TYPE
from tests.integration.browser.conftest import VIEWPORT, Stack
from tests.integration.browser.pages import shown_after_reload
from tests.integration.conftest import eventually

Shoot = Callable[..., Path]
LONG_TENANT = "acme-" + "x" * 195
LONG_SCHEDULE = "monthly-invoices-" + "s" * 183
LONG_REASON = "paused for the invoice provider's maintenance window " + "m" * 250
ROWS = 1000
SHOWN = ("jobs", "schedules", "lateness")
"""The pages whose screenshots docs/console.md shows (every page is checked)."""

# Every element whose text must stay on one line: status words, times, truncated values, state cells, counts.
ONE_LINE = ".status, time.when, .v, td.state > .status, #status-counts a, .pager .range, td.count, td.depth"
BROKEN_JS = """(selector) => {
  const lines = (e) => { const r = document.createRange(); r.selectNodeContents(e);
    return new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top))).size; };
  const shown = [...document.querySelectorAll(selector)]
    .filter((e) => e.getClientRects().length && e.textContent.trim());
  return { checked: shown.length,
           broken: shown.filter((e) => lines(e) > 1).map((e) => e.textContent.trim().slice(0, 60)) };
}"""


@dataclass(frozen=True)
class World:
    """What the pages show: a dead job of the long task type, and the thousand jobs of the long tenant."""

    dead_job: str


@pytest.fixture(scope="module")
def world(stack: Stack) -> World:
    """A thousand jobs of a 200-character tenant, jobs of a 200-character task type (some dead with a 300-character
    error), a 200-character schedule of that task type, and the task type paused with a 300-character reason."""
    client = stack.client
    done = client.submit_many([{"task_type": "noop", "payload": {}, "tenant": LONG_TENANT,
                                "labels": {"team": "billing-" + "z" * 250}} for _ in range(ROWS - 10)]
                              + [{"task_type": LONG_TASK_TYPE, "payload": {}, "tenant": LONG_TENANT}] * 5)
    dead = client.submit_many([{"task_type": LONG_TASK_TYPE, "payload": {"fail": True}, "tenant": LONG_TENANT}] * 3)
    client.submit("echo", {"text": "w" * 400}, tenant=LONG_TENANT, delay=3600)  # scheduled
    outcomes = client.wait_all(done + dead, 120)
    assert sorted({o.status for o in outcomes}) == ["completed", "dead"]
    assert client.add_schedule(LONG_SCHEDULE, LONG_TASK_TYPE, "0 3 1 * *", tenant=LONG_TENANT).accepted
    assert all(o.events for o in client.pause_task_type(LONG_TASK_TYPE, reason=LONG_REASON, requested_by="ops"))
    eventually(lambda: client.jobs(tenant=LONG_TENANT, limit=1).counts.get("completed", 0) >= ROWS - 5, 60,
               "the view folded the thousand jobs")
    return World(dead[0].job_id)


def pages(world: World) -> list[tuple[str, str, str]]:
    """(name, path, a selector that shows the page holds the long values) of every page."""
    tenant, kind = quote(LONG_TENANT, safe=""), f'[data-task-type="{LONG_TASK_TYPE}"]'
    return [
        ("overview", "/", f"#recent-table tr{kind}"),
        ("jobs", f"/jobs?tenant={tenant}&limit={ROWS}", f'#jobs-table tr[data-tenant="{LONG_TENANT}"]'),
        ("job", f"/jobs/{world.dead_job}", "#attempt-errors pre.traceback"),
        ("dlq", f"/dlq?tenant={tenant}", f"#dlq-table tr{kind}"),
        ("tasks", "/tasks", f"#tasks-table tr{kind}[data-paused=true]"),
        ("schedules", "/schedules", f'#schedules-table tr[data-schedule-id="{LONG_SCHEDULE}"][data-state=task-paused]'),
        ("tenants", "/tenants", f'#tenants-table tr[data-tenant="{LONG_TENANT}"]'),
        ("workers", "/workers", "#workers-table tr.worker"),
        ("lateness", "/lateness", f"#lateness-table tr{kind}"),
        ("lateness-1h", "/lateness?window=1h", f"#lateness-table tr{kind}"),
    ]


def test_every_page_fits_1280_px_and_no_status_word_breaks(stack: Stack, world: World, page: Page,
                                                           shoot: Shoot) -> None:
    assert VIEWPORT["width"] == 1280
    wrong: list[str] = []  # every page is looked at, and every fault said at once
    for name, path, holds in pages(world):
        shown_after_reload(page, stack.url + path, holds)
        width = page.evaluate("document.scrollingElement.scrollWidth")
        lines: dict[str, Any] = page.evaluate(BROKEN_JS, ONE_LINE)
        wrong += [f"{path}: no status, time or value to check"] if not lines["checked"] else []
        wrong += [f"{path} is {width} px wide"] if width > 1280 else []
        wrong += [f"{path}: broken over lines: {lines['broken'][:3]}"] if lines["broken"] else []
        if name in SHOWN:
            shoot(page, f"long-{name}", full_page=name != "jobs")  # the thousand rows: the window's worth
    assert not wrong, "\n".join(wrong)


def test_a_long_value_is_cut_with_its_whole_text_in_the_tooltip(stack: Stack, world: World, page: Page) -> None:
    page.goto(f"{stack.url}/jobs?tenant={quote(LONG_TENANT, safe='')}&status=dead")
    cell = page.locator(f'#jobs-table tr[data-tenant="{LONG_TENANT}"] .v[title="{LONG_TENANT}"]').first
    expect(cell).to_have_text(LONG_TENANT)
    box = cell.bounding_box()
    assert box is not None and box["width"] < 400, f"the tenant takes {box} px"  # cut, not stretched
    status = page.locator(f'#jobs-table tr[data-tenant="{LONG_TENANT}"] .status').first
    expect(status).to_have_text("dead")
