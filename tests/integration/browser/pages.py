"""What the browser tests share: a tenant of their own, and a page reloaded until it shows what the server now holds."""

from __future__ import annotations

import time
import uuid

from playwright.sync_api import Locator, Page, expect


def tenant(name: str) -> str:
    """A tenant name no other test (or earlier run) uses."""
    return f"{name}-{uuid.uuid4().hex[:4]}"


def shown_after_reload(page: Page, url: str, selector: str, timeout: float = 30.0) -> Locator:
    """Reload ``url`` until ``selector`` is on the page (the view it shows folds the log a moment behind)."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(url)
        found = page.locator(selector)
        if found.count() or time.monotonic() > deadline:
            expect(found.first).to_be_visible(timeout=1)
            return found
        time.sleep(0.5)
