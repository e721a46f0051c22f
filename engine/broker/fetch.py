"""Resolve the Kafka broker jars with Maven into a cache directory outside the repo.

The cache directory is the source of truth for "are the jars there": it counts as
complete only when it holds the kafka jar *and* the marker written after Maven succeeded.
Maven writes into a sibling temporary directory that is renamed into place, so an
interrupted download never looks complete and simply re-runs.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from engine.broker.errors import JarFetchError, JavaNotFoundError, MavenNotFoundError

__all__ = ["KAFKA_VERSION", "ensure_jars", "libs_dir", "require_java"]

KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
LIBS_ENV = "EPOCHQ_KAFKA_LIBS_DIR"
MARKER = ".epochq-complete"
KAFKA_JAR = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
MAVEN_TIMEOUT_S = 1800.0
OUTPUT_TAIL_LINES = 25
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

JAVA_HINT = (
    "install a JDK 17+ (e.g. `apt-get install openjdk-17-jre-headless`) "
    "or run Kafka in Docker with `docker compose up kafka`"
)


def libs_dir() -> Path:
    """Return the jar cache directory (env ``EPOCHQ_KAFKA_LIBS_DIR`` overrides)."""
    override = os.environ.get(LIBS_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "epochq" / f"kafka-{KAFKA_VERSION}" / "libs"


def require_java() -> str:
    """Return the path of ``java`` on PATH, or raise :class:`JavaNotFoundError`."""
    java = shutil.which("java")
    if java is None:
        raise JavaNotFoundError(f"no `java` on PATH: {JAVA_HINT}")
    return java


def is_complete(directory: Path) -> bool:
    """Decide whether ``directory`` holds a finished jar download."""
    return (directory / KAFKA_JAR).is_file() and (directory / MARKER).is_file()


def ensure_jars(directory: Path | None = None) -> Path:
    """Make sure the Kafka jars are in the cache, fetching them with Maven if needed.

    Returns the directory holding the jars (usable as ``-cp '<dir>/*'``).
    """
    target = directory or libs_dir()
    if is_complete(target):
        return target
    require_java()
    mvn = _require_maven()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if not is_complete(target):
            _download(mvn, target)
    return target


def _require_maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenNotFoundError(
            "no `mvn` on PATH, needed once to fetch the Kafka jars: install Maven "
            "(e.g. `apt-get install maven`), or run Kafka in Docker with `docker compose up kafka`"
        )
    return mvn


def _download(mvn: str, target: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        with resources.as_file(resources.files("engine.broker") / "pom.xml") as pom:
            _run_maven(mvn, pom, staging)
        if not (staging / KAFKA_JAR).is_file():
            raise JarFetchError(f"Maven finished but {KAFKA_JAR} is missing from {staging}")
        (staging / MARKER).write_text(f"kafka {KAFKA_VERSION}\n")
        staging.chmod(0o755)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _run_maven(mvn: str, pom: Path, output: Path) -> None:
    cmd = [
        mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={output}",
    ]
    try:
        done = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=MAVEN_TIMEOUT_S, check=False, cwd=output,
        )
    except subprocess.TimeoutExpired as e:
        raise JarFetchError(
            f"Maven did not finish within {MAVEN_TIMEOUT_S:.0f}s; Maven Central may be unreachable"
        ) from e
    if done.returncode != 0:
        raise _maven_failure(done.returncode, done.stdout or "")


def _maven_failure(code: int, output: str) -> JarFetchError:
    plain = _ANSI.sub("", output)
    lines = [ln for ln in plain.splitlines() if ln.strip() not in ("", "[ERROR]")][-OUTPUT_TAIL_LINES:]
    tail = "\n".join(lines) or "(no output)"
    return JarFetchError(
        f"Maven failed (exit {code}) fetching the Kafka {KAFKA_VERSION} jars; Maven Central "
        "may be unreachable (check network, proxy, ~/.m2/settings.xml). Last lines of its output:",
        detail=tail,
    )


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
