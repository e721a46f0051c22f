"""Browser fixtures: Debian's Chromium driven by Playwright, against a console on a real engine and broker.

``make test`` installs Debian's ``chromium`` when /usr/bin/chromium is missing (``make chromium``), and
Playwright for Python comes with the test extras: it launches that Chromium (``executable_path``), never
a browser of its own (``playwright install`` downloads one, which is not possible here). Without
Chromium the tests fail with one line that says what to install: never a skip.

One engine (the test app of ``tests/integration/apps.py``) and one console serve every test of a
module; each test uses tenants and ids of its own. Screenshots go to a temp dir
(docs/console/ with `make screenshots`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import ROOT, EngineProcess, eventually, module_namespace
from tests.integration.helpers.ports import free_port

CHROMIUM = Path(os.environ.get("EPOCHQ_CHROMIUM", "/usr/bin/chromium"))
SHOTS = Path(os.environ.get("EPOCHQ_SCREENSHOTS") or Path(tempfile.gettempdir()) / "epochq-console-shots")
"""Where screenshots go: a temp dir, or ``EPOCHQ_SCREENSHOTS`` (`make screenshots` sets docs/console)."""
VIEWPORT = {"width": 1280, "height": 800}
# As root Chromium needs --no-sandbox; the rest keeps it off the network (closed here) and quick to start.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-quic",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
STEP_TIMEOUT_MS = 20_000


def browser_missing() -> str:
    """Why the browser tests cannot run here ("" when they can): a failure, never a skip."""
    if not CHROMIUM.exists():
        return (f"{CHROMIUM} not found: the browser tests need Debian's Chromium "
                "(`make chromium`, i.e. apt-get install chromium; `make test` does it)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is missing: pip install -e '.[test]' (`make test` does it)"
    return ""


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium under Playwright, one for the whole session."""
    reason = browser_missing()
    if reason:
        pytest.fail(reason, pytrace=False)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=STEP_TIMEOUT_MS)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (its own cookies) at 1280×800, closed after the test."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def shoot() -> Callable[..., Path]:
    """Take a screenshot into SHOTS/NAME.png (docs/console/ with `make screenshots`): the 1280×800 viewport, or the
    whole page (``full_page=True``) where what matters lies below it, as a job's timeline does."""
    def take(page: Any, name: str, *, full_page: bool = False) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page)
        return path
    return take


class ConsoleProcess:
    """An ``epochq console`` in a child process, reading the engine's state directory."""

    def __init__(self, settings: Settings, state_dir: Path, tmp: Path, extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"console-{self.port}.log"
        cmd = [sys.executable, "-m", "engine.cli.main", "console", "--bootstrap", settings.require_bootstrap(),
               "--namespace", settings.namespace, "--state-dir", str(state_dir), "--port", str(self.port), *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the console answers ``GET /healthz``; fail at once if it exited."""
        def answers() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"console exited:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2):
                    return True
            except urllib.error.HTTPError:
                return True  # it answers (a console with a token asks for it even there)
            except (urllib.error.URLError, OSError):
                return False

        eventually(answers, timeout, "the console answering GET /healthz")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not leave in 10 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@dataclass
class Stack:
    """What a browser test works on: the console's address, and a client and settings on its namespace."""

    url: str
    settings: Settings
    client: Client  # reads the engine's state directory (schedules, dead letters)
    engine: EngineProcess
    tmp: Path


@pytest.fixture(scope="module")
def stack(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A namespace (3 partitions), one engine running the test app, and a console on a free port."""
    tmp = tmp_path_factory.mktemp("console")
    settings = module_namespace(bootstrap, tmp)
    engine = EngineProcess(settings, "engine-a", tmp)
    console: ConsoleProcess | None = None
    client = Client(engine.settings(settings))
    try:
        engine.wait_active(3)
        console = ConsoleProcess(settings, engine.state_dir, tmp)
        console.wait_ready()
        yield Stack(console.url, engine.settings(settings), client, engine, tmp)
    finally:
        if console is not None:
            console.stop()
        engine.stop()
        client.close()
