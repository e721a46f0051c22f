"""Engine fixtures: topics per test, engine instances as real processes, a client."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import IO, TypeVar

import pytest

from engine.client import Client, Outcome
from engine.config import Settings, load_settings
from engine.runtime.kafka.schemas import stop_reading_through
from engine.runtime.topics import ensure_topics

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
SESSION_TIMEOUT_MS = 3000
"""The consumer group session timeout of the tests' engines: a killed engine's partitions move 3 s after it died,
and a join rebalances within about two heartbeats of 750 ms. The engine's default (6 s) is for production,
where a busy host must not lose its partitions; none of the tests depends on it. A broker whose
``group.min.session.timeout.ms`` is higher (Kafka's default is 6 s) gets its minimum: the brokers the tests
start allow 1 s (engine/broker/config.py, the container of tests/conftest.py, docker-compose.yml)."""


def eventually(check: Callable[[], T], timeout: float = 30.0, what: str = "", every: float = 0.2) -> T:
    """Poll ``check`` until it holds, and return what it returned then: the one wait of the integration tests.

    ``check`` holds once it returns something true without raising AssertionError: a predicate (``lambda:
    job.status == "dead"``), a search whose empty result means "not yet", or a function of asserts that returns
    what the test reads next (or True). After ``timeout`` s it fails with its last AssertionError, or with
    ``what`` (the check's name by default) and the last value it returned.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        else:
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:g} s: {what or getattr(check, '__name__', check)} "
                                     f"(last returned {found!r})")
        time.sleep(every)


def status_is(*statuses: str) -> Callable[[Outcome], bool]:
    """A wait's ``until`` for a status that is not final (``handle.wait(30, until=status_is("scheduled"))``): the wait
    ends once the job is there, where a plain wait would run out its whole timeout before answering."""
    return lambda outcome: outcome.status in statuses


def stop_process(proc: subprocess.Popen[bytes], log: IO[str], timeout: float = 30.0) -> int:
    """SIGTERM (after SIGCONT, in case it was stopped), then wait; SIGKILL if it does not leave in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()
    return proc.returncode


@pytest.fixture(autouse=True)
def _schema_sources() -> Iterator[None]:
    """A test's namespaces stop being schema sources of this process when it ends: a later test's
    record with an unknown fingerprint (the codec's fuzz tests) must not read every one of them."""
    yield
    stop_reading_through()


@pytest.fixture
def settings(bootstrap: str, unique_ns: str, tmp_path: Path) -> Settings:
    """Settings for a fresh namespace whose topics (3 partitions) exist."""
    s = load_settings(bootstrap=bootstrap, namespace=unique_ns, state_dir=str(tmp_path / "state"))
    ensure_topics(s, partitions=3)
    return s


def module_namespace(bootstrap: str, tmp: Path, partitions: int = 3) -> Settings:
    """Settings on a fresh namespace (its topics made, ``partitions`` each) with its state under ``tmp``: what a
    module-scoped fixture shares among its tests."""
    settings = load_settings(bootstrap=bootstrap, namespace=f"t{uuid.uuid4().hex[:10]}", state_dir=str(tmp / "state"))
    ensure_topics(settings, partitions=partitions)
    return settings


@pytest.fixture
def client(settings: Settings) -> Iterator[Client]:
    """A client on the test's namespace."""
    c = Client(settings)
    yield c
    c.close()


def session_timeout_ms(settings: Settings) -> int:
    """:data:`SESSION_TIMEOUT_MS`, or the broker's ``group.min.session.timeout.ms`` where that is higher; the
    engine's default, 6 s, where ``settings``' user may not read the broker's configuration."""
    return _session_timeout_ms(tuple(sorted(settings.kafka_config().items())))


@cache
def _session_timeout_ms(config: tuple[tuple[str, str], ...]) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient(dict(config))
    try:
        broker = next(iter(admin.list_topics(timeout=30).brokers))
        (found,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker))]).values()
        return max(SESSION_TIMEOUT_MS, int(found.result(30)["group.min.session.timeout.ms"].value))
    except KafkaException:  # not allowed to describe the cluster (a secure broker's engine user)
        return 6000


class EngineProcess:
    """An ``epochq engine run`` in a child process, with its own state directory."""

    def __init__(self, settings: Settings, owner: str, tmp: Path, app: str = "tests.integration.apps:app",
                 extra: tuple[str, ...] = ()):
        self.owner, self.state_dir = owner, tmp / f"state-{owner}"
        self.log_path = tmp / f"engine-{owner}.log"
        env = {**os.environ, "EPOCHQ_TEST_MARKS": str(tmp / "marks"), "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "engine.cli.main", "engine", "run", app, "--bootstrap",
               settings.require_bootstrap(), "--namespace", settings.namespace, "--state-dir",
               str(self.state_dir), "--owner-id", owner,
               "--session-timeout-ms", str(session_timeout_ms(settings)), "--grace", "5", *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def settings(self, base: Settings) -> Settings:
        """The base settings pointed at this instance's state directory."""
        return base.model_copy(update={"state_dir": self.state_dir})

    def logs(self) -> str:
        """Everything the instance printed so far."""
        return self.log_path.read_text()

    def wait_active(self, partitions: int, timeout: float = 60.0) -> None:
        """Block until the instance logged ``partitions`` partitions active; fail at once if it exited."""
        def active() -> bool:
            logs = self.logs()
            if self.proc.poll() is not None:
                pytest.fail(f"engine {self.owner} exited:\n{logs[-3000:]}")
            assert logs.count(": active at epoch") >= partitions, f"engine {self.owner} not active:\n{logs[-3000:]}"
            return True

        eventually(active, timeout)

    def owned(self) -> set[int]:
        """The partitions the instance holds now, from its own log lines (active, not handed back or dropped since)."""
        last: dict[int, str] = {}
        for p, what in re.findall(r"partition (\d+): (active at|handed back|dropped)", self.logs()):
            last[int(p)] = what
        return {p for p, what in last.items() if what == "active at"}

    def signal(self, sig: int) -> None:
        """Send a signal (SIGKILL, SIGSTOP, SIGCONT, SIGTERM)."""
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; SIGKILL if it does not leave in time."""
        return stop_process(self.proc, self.log, timeout)


@pytest.fixture
def engines(settings: Settings, tmp_path: Path) -> Iterator[list[EngineProcess]]:
    """A list to start engines into; every one is stopped at teardown, even on failure."""
    started: list[EngineProcess] = []
    yield started
    for engine in started:
        engine.stop()


def start_engine(engines: list[EngineProcess], settings: Settings, owner: str, tmp: Path,
                 **kwargs: object) -> EngineProcess:
    """Start one engine process and remember it for teardown."""
    engine = EngineProcess(settings, owner, tmp, **kwargs)  # type: ignore[arg-type]
    engines.append(engine)
    return engine


_BUILDS: list[Future[dict[str, str]]] = []
"""The example producers' build, started in the background once the run's tests are known (at most one)."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the example producers and consumers as the run begins, if one of its tests needs them: the
    build (a minute or more where Go and Maven caches are cold) then overlaps the tests before those."""
    if session.config.option.collectonly or _BUILDS:
        return
    if any("built" in getattr(item, "fixturenames", ()) for item in session.items):
        from tests.integration.helpers.producers import build_all

        pool = ThreadPoolExecutor(1, thread_name_prefix="producers-build")
        _BUILDS.append(pool.submit(build_all))
        pool.shutdown(wait=False)


@pytest.fixture(scope="session")
def built() -> dict[str, str]:
    """The example producers and consumers, built once per run: language -> "" when built, or why not (a failed
    build fails the tests that need it)."""
    from tests.integration.helpers.producers import build_all

    return _BUILDS[0].result() if _BUILDS else build_all()


def events_by_job(settings: Settings, partitions: int = 3) -> dict[str, list]:
    """Every job's events, read from the log in one pass per partition, with fencing verdicts."""
    from engine.contract.codec import decode_event_at
    from engine.runtime import kafka
    from engine.questions.history import scan_partition, with_fencing

    out: dict[str, list] = {}
    consumer = kafka.events_reader(settings, "test-scan")
    try:
        for p in range(partitions):
            records = [(o, decode_event_at(v, settings.events_topic, p, o))
                       for o, _, v in scan_partition(consumer, settings.events_topic, p)]
            for logged in with_fencing(records, None):
                out.setdefault(logged.event.job_id, []).append(logged)
    finally:
        consumer.close()
    return out


def verify_partition(settings: Settings, partition: int):  # type: ignore[no-untyped-def]
    """Rebuild ``partition`` from the log and compare it with the live store of ``settings``."""
    from engine.runtime.kafka import KafkaLog
    from projections.rebuild import verify

    with KafkaLog(settings) as log:
        return verify(log, settings, partition)
