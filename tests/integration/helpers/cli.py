"""The ``epochq`` command line as a child process, and what a user sees of its mistakes."""

from __future__ import annotations

import subprocess
import sys

from engine.config import Settings
from tests.integration.conftest import ROOT


def epochq(settings: Settings, *args: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    """``epochq ARGS --bootstrap ... --namespace ...`` on the test's namespace (or ``namespace``), output captured."""
    cmd = [sys.executable, "-m", "engine.cli.main", *args, "--bootstrap", settings.require_bootstrap(),
           "--namespace", namespace or settings.namespace]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line epochq wrote on stderr (librdkafka's own ``%N|`` lines aside)."""
    ours = [line for line in done.stderr.splitlines() if not line.startswith("%")]
    assert len(ours) == 1 and "Traceback" not in done.stderr, done.stderr
    return ours[0]
