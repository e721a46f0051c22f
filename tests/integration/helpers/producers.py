"""The example producers and consumers in other languages (examples/producers/), built by their build.sh.

Each is built once per test run, in the background from the run's start when one of its tests needs them
(conftest's ``pytest_collection_finish`` and ``built`` fixture; the first build downloads and compiles the
dependencies: about a minute and a half for Go on a cold cache, half a minute for Java; later runs skip
it). A language whose toolchain is not on PATH fails its tests (never a skip).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess

from tests.integration.conftest import ROOT

PRODUCERS = ROOT / "examples" / "producers"
SCHEMAS = ROOT / "schemas"
TOOLS = {"node": ("node", "npm"), "go": ("go",), "java": ("java", "mvn")}
JAVA_JAR = PRODUCERS / "java" / "target" / "epochq-produce.jar"
BUILD_TIMEOUT_S = 900
"""One language's build at most; the tests that build carry a timeout that covers all three."""


def build_all() -> dict[str, str]:
    """language -> "" when built, or the reason it is not (a missing toolchain: the test then fails, never skips)."""
    with open(PRODUCERS / "build.sh") as script:  # one build at a time: each of `pytest -n N`'s workers builds
        fcntl.flock(script, fcntl.LOCK_EX)
        return _build_all()


def _build_all() -> dict[str, str]:
    status = {}
    for language, tools in TOOLS.items():
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            status[language] = f"{', '.join(missing)} not on PATH"
            continue
        run = subprocess.run([str(PRODUCERS / "build.sh"), language], capture_output=True, text=True,
                             timeout=BUILD_TIMEOUT_S)
        assert run.returncode == 0, f"build.sh {language} failed:\n{run.stdout}\n{run.stderr}"
        status[language] = ""
    return status


def not_built(language: str, built: dict[str, str]) -> str:
    """Why the ``language`` producer cannot be tested: a failure, never a skip."""
    return f"{language} producer not tested: {built[language]} (make test needs Node.js, Go, Java and Maven)"
