"""Consumers in other languages (examples/producers/): readers of any age read <ns>.events by fingerprint.

Each consumer resolves the writer schema of every record from ``<ns>.schemas`` and reads it into
the reader schema it was built with (``--version N``: ``schemas/vN/event.avsc``). A consumer
built with v1 reads a log written by today's engine — every job's events, the newer types
skipped and counted — and one built with today's schemas reads a log written with v1. The
consumers are built by ``examples/producers/build.sh`` (conftest's ``built`` fixture).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.client import Client
from engine.config import Settings, load_settings
from engine.contract.codec import catalog
from engine.runtime.topics import ensure_topics
from tests.integration.conftest import EngineProcess
from tests.integration.logs import LIFE, NEWER_TYPES, write_today, write_v1
from tests.integration.helpers.producers import BUILD_TIMEOUT_S, JAVA_JAR, PRODUCERS, SCHEMAS, not_built

pytestmark = pytest.mark.timeout(3 * BUILD_TIMEOUT_S)  # the first test builds the three languages' consumers

OLDEST = 1
NEWEST = catalog("event").current.version


def consumer_command(language: str, settings: Settings, version: int) -> list[str]:
    """The command line that reads every event of the namespace with ``language``'s example consumer."""
    args = [settings.require_bootstrap(), settings.namespace]
    if language == "node":
        return ["node", str(PRODUCERS / "node" / "consume.js"), *args, "--schemas", str(SCHEMAS), "--version",
                str(version)]
    flags = ["-schemas", str(SCHEMAS), "-version", str(version)]
    if language == "java":
        return ["java", "-cp", str(JAVA_JAR), "io.epochq.example.Consume", *flags, *args]
    return [str(PRODUCERS / "go" / "epochq-consume"), *flags, *args]


def consume(language: str, settings: Settings, version: int) -> tuple[dict[str, list[str]], dict[str, int], str]:
    """Each job's event types as the consumer read them, the types it skipped, and what it said on stderr."""
    run = subprocess.run(consumer_command(language, settings, version), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    summary = lines.pop()["summary"]
    types: dict[str, list[str]] = {}
    for event in lines:
        if event["job_id"]:
            types.setdefault(event["job_id"], []).append(event["type"])
    assert summary["read"] == len(lines)
    return types, summary["skipped"], run.stderr


def namespace(bootstrap: str, tmp: Path) -> Settings:
    import uuid

    settings = load_settings(bootstrap=bootstrap, namespace=f"t{uuid.uuid4().hex[:10]}", state_dir=str(tmp / "state"))
    ensure_topics(settings, partitions=3)
    return settings


@pytest.fixture(scope="module")
def today(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, list[str]]]:
    """A namespace written by today's engine (v4 events, types v1 lacks among them), and its jobs."""
    tmp = tmp_path_factory.mktemp("today")
    settings = namespace(bootstrap, tmp)
    engines: list[EngineProcess] = []
    with Client(settings) as client:
        try:
            jobs = write_today(settings, client, engines, tmp)
        finally:
            for engine in engines:
                engine.stop()
    yield settings, jobs


@pytest.fixture(scope="module")
def old(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, list[str]]:
    """A namespace whose events were all written with event v1, and its jobs."""
    settings = namespace(bootstrap, tmp_path_factory.mktemp("old"))
    return settings, write_v1(settings)


@pytest.mark.parametrize("language", ["node", "go", "java"])
def test_a_consumer_built_with_v1_reads_what_todays_engine_wrote(
        language: str, built: dict[str, str], today: tuple[Settings, list[str]]) -> None:
    if built[language]:
        pytest.fail(not_built(language, built))
    settings, jobs = today
    types, skipped, said = consume(language, settings, OLDEST)
    for job in jobs:
        assert [t for t in types.get(job, []) if t in LIFE] == LIFE, (job, types.get(job))
    assert NEWER_TYPES <= set(skipped), skipped
    assert f"this reader's schema (v{OLDEST}) does not have" in said and "TaskTypePaused x" in said


@pytest.mark.parametrize("language", ["node", "go", "java"])
def test_a_consumer_built_with_todays_schemas_reads_a_log_written_with_v1(
        language: str, built: dict[str, str], old: tuple[Settings, list[str]]) -> None:
    if built[language]:
        pytest.fail(not_built(language, built))
    settings, jobs = old
    types, skipped, _ = consume(language, settings, NEWEST)
    assert skipped == {}
    assert {job: types.get(job) for job in jobs} == {job: LIFE for job in jobs}


@pytest.fixture(scope="module")
def poisoned(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, list[str], str]:
    """A namespace written with event v1 whose <ns>.schemas then got v1's key with job_id and tenant_id swapped."""
    from engine.runtime.kafka import schemas

    settings = namespace(bootstrap, tmp_path_factory.mktemp("poisoned"))
    jobs = write_v1(settings)
    v1 = next(e for e in schemas.shipped() if (e.subject, e.version) == ("event", 1))
    schema = json.loads(v1.text)
    names = [f["name"] for f in schema["fields"]]
    i, j = names.index("job_id"), names.index("tenant_id")
    schema["fields"][i], schema["fields"][j] = schema["fields"][j], schema["fields"][i]
    schemas.publish(settings, [schemas.Registered(v1.key, "event", 1, json.dumps(schema))])
    return settings, jobs, v1.key


@pytest.mark.parametrize("language", ["node", "go", "java"])
def test_a_consumer_ignores_a_schema_whose_text_does_not_have_its_key_s_fingerprint(
        language: str, built: dict[str, str], poisoned: tuple[Settings, list[str], str]) -> None:
    if built[language]:
        pytest.fail(not_built(language, built))
    settings, jobs, key = poisoned
    types, _, said = consume(language, settings, NEWEST)
    assert {job: types.get(job) for job in jobs} == {job: LIFE for job in jobs}  # job ids, not tenants
    assert f"ignored the schema under key {key}" in said, said
