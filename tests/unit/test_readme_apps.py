"""The documents' apps are importable by ``epochq engine run``: a snippet that defines an App submits nothing and
waits for nothing at import (an import that waits 30 s for a job stalls the engine that imports it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of a Markdown page."""
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_no_app_snippet_submits_or_waits_at_import() -> None:
    offenders = [f"{page.relative_to(ROOT)} block {n}" for page in PAGES
                 for n, block in enumerate(python_blocks(page.read_text())) if "App()" in block
                 and any(call in block for call in (".submit(", ".submit_many(", ".wait(", "wait_all("))]
    assert offenders == [], "put the submit in a snippet of its own (a client script), not beside the App"


def test_the_readme_has_an_app_and_a_client_snippet() -> None:
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert any("App()" in b for b in blocks) and any("Client()" in b and ".submit(" in b for b in blocks)
