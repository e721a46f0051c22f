"""What the browser tests share: a tenant of their own, and a page reloaded until it shows what the server now holds."""

from __future__ import annotations

import uuid

from playwright.sync_api import Locator, Page, expect

from tests.integration.conftest import eventually


def tenant(name: str) -> str:
    """A tenant name no other test (or earlier run) uses."""
    return f"{name}-{uuid.uuid4().hex[:4]}"


def shown_after_reload(page: Page, url: str, selector: str, timeout: float = 30.0) -> Locator:
    """Reload ``url`` until ``selector`` is on the page (the view it shows folds the log a moment behind)."""
    def reloaded() -> tuple[Locator]:
        page.goto(url)
        found = page.locator(selector)
        expect(found.first).to_be_visible(timeout=1)
        return (found,)  # a Locator has no truth value of its own

    return eventually(reloaded, timeout, every=0.5)[0]
