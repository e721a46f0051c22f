"""Producers in other languages (examples/producers/): their jobs run under the Python engine, intact.

Each producer is built once per run by ``examples/producers/build.sh`` (conftest's ``built`` fixture,
tests/integration/helpers/producers.py). A language whose toolchain is not on PATH fails its tests (never a skip).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from engine.client import Client, Outcome
from engine.config import Settings
from engine.contract.codec import catalog, decode_command
from engine.contract.partitioner import partition_for
from engine.runtime import kafka
from engine.questions.history import job_events, scan_partition
from tests.integration.conftest import eventually, start_engine
from tests.integration.helpers.keys import key_files
from tests.integration.helpers.producers import BUILD_TIMEOUT_S, JAVA_JAR, PRODUCERS, SCHEMAS, not_built

pytestmark = pytest.mark.timeout(3 * BUILD_TIMEOUT_S)  # the first test builds the three languages' producers

# Non-ASCII text, integers past 2**53 (a JS number would round them), nested JSON: built as
# text and passed through as bytes, so the producers never parse and re-serialise it.
PAYLOAD_TEXT = (
    '{"text":"Grüße, 東京 🚀","big":9007199254740993,"negative_big":-9223372036854775807,'
    '"nested":{"list":[1,2.5,{"deep":[null,true,"x\\"y"]}],"empty":{},"empty_list":[]}}'
)


def producer_command(language: str, settings: Settings, task_type: str, tenant: str, payload: str,
                     labels: dict[str, str]) -> list[str]:
    """The command line that submits one job with ``language``'s example producer."""
    args = [settings.require_bootstrap(), settings.namespace, task_type, tenant, payload]
    if language == "node":
        flags = [x for k, v in labels.items() for x in ("--label", f"{k}={v}")]
        return ["node", str(PRODUCERS / "node" / "produce.js"), *args, *flags, "--schemas", str(SCHEMAS)]
    flags = [x for k, v in labels.items() for x in ("-label", f"{k}={v}")]
    if language == "java":  # the same flags as Go's
        return ["java", "-jar", str(JAVA_JAR), "-schemas", str(SCHEMAS), *flags, *args]
    return [str(PRODUCERS / "go" / "epochq-produce"), "-schemas", str(SCHEMAS), *flags, *args]


def wait_done(client: Client, job_id: str, timeout: float = 30.0) -> Outcome:
    """The job's outcome from the log once it is final."""
    def final() -> Outcome | None:
        outcome = client.status(job_id)
        return outcome if outcome.done else None

    return eventually(final, timeout, f"job {job_id} to end", every=0.3)


def command_record(settings: Settings, partition: int, job_id: str) -> tuple[bytes, object]:
    """The raw value and decoded command of the job's record on ``<ns>.commands``."""
    consumer = kafka.events_reader(settings, "test-commands")
    try:
        for _, key, value in scan_partition(consumer, settings.commands_topic, partition):
            if key == job_id.encode():
                return value, decode_command(value)
    finally:
        consumer.close()
    raise AssertionError(f"no command for {job_id} in {settings.commands_topic}[{partition}]")


@pytest.mark.parametrize("language", ["node", "go", "java"])
def test_a_job_from_another_language_runs_with_its_payload_intact(
        language: str, built: dict[str, str], settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if built[language]:
        pytest.fail(not_built(language, built))
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    tenant, labels = f"{language}-team", {"origin": language, "région": "東京"}

    run = subprocess.run(producer_command(language, settings, "echo", tenant, PAYLOAD_TEXT, labels),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    job_id = printed["job_id"]
    assert printed["partition"] == partition_for(job_id, 3)  # Java-compatible murmur2

    outcome = wait_done(client, job_id)
    sent = json.loads(PAYLOAD_TEXT)
    assert outcome.status == "completed", (outcome, engine.logs()[-2000:])
    assert outcome.result == {"payload": sent, "tenant": tenant, "attempt": 1}
    assert outcome.result["payload"]["big"] == 2**53 + 1
    assert outcome.result["payload"]["text"] == "Grüße, 東京 🚀"

    history = job_events(settings, job_id)
    assert [e.event.type for e in history] == ["JobSubmitted", "JobQueued", "JobStarted", "JobSucceeded"]
    assert not any(e.fenced for e in history)
    assert all(e.event.tenant_id == tenant for e in history)
    submitted = history[0].event.body
    assert submitted.task_type == "echo" and submitted.payload.data == PAYLOAD_TEXT.encode()

    raw, command = command_record(settings, printed["partition"], job_id)
    assert raw[:10] == catalog("command").current.header  # written with the newest schema
    assert command.body.labels == labels  # type: ignore[attr-defined]
    assert registrations(settings, raw[2:10].hex()) == 2  # topics ensure's, and the producer's own before it wrote


def registrations(settings: Settings, key: str) -> int:
    """How many records of ``<ns>.schemas`` register the schema with this fingerprint."""
    consumer = kafka.events_reader(settings, "test-schemas")
    try:
        return sum(k == key.encode() for _, k, _ in scan_partition(consumer, settings.schemas_topic, 0))
    finally:
        consumer.close()


@pytest.mark.parametrize("language", ["node", "go", "java"])
def test_a_producer_signs_its_tenants_commands_when_the_namespace_requires_it(  # type: ignore[no-untyped-def]
        language: str, built: dict[str, str], settings: Settings, client: Client, engines, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if built[language]:
        pytest.fail(not_built(language, built))
    from engine.contract.signing import load_public_key
    from engine.runtime.tenants import set_tenant
    tenant = f"{language}-team"
    private, public = key_files(tmp_path, tenant)
    engine_key, _ = key_files(tmp_path, "engines")
    set_tenant(settings, tenant, 1.0, public_keys=[load_public_key(public)])
    monkeypatch.setenv("EPOCHQ_REQUIRE_SIGNATURES", "true")
    monkeypatch.setenv("EPOCHQ_ENGINE_KEY_FILE", str(engine_key))
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    command = producer_command(language, settings, "echo", tenant, '{"signed": true}', {})
    flag = "--signing-key" if language == "node" else "-signing-key"
    at = {"go": 1, "java": 3}.get(language, len(command))  # Go's and Java's flags come before the arguments
    signing = [*command[:at], flag, str(private), *command[at:]]
    signed = subprocess.run(signing, capture_output=True, text=True, timeout=60)
    assert signed.returncode == 0, signed.stderr
    unsigned = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert unsigned.returncode == 0, unsigned.stderr
    outcome = wait_done(client, json.loads(signed.stdout)["job_id"])
    assert outcome.status == "completed" and outcome.result["payload"] == {"signed": True}, engine.logs()[-2000:]
    refused = wait_done(client, json.loads(unsigned.stdout)["job_id"])
    assert refused.status == "rejected" and refused.reason == "unauthenticated", refused


def test_the_java_producer_keeps_non_ascii_arguments_under_an_ascii_locale(
        built: dict[str, str], settings: Settings) -> None:
    """Java decodes argv with the locale's charset (LANG=C: "Grüße" -> "Gr??e"); it rereads the raw bytes."""
    if built["java"]:
        pytest.fail(not_built("java", built))
    labels = {"région": "東京"}
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    run = subprocess.run(producer_command("java", settings, "echo", "java-team", PAYLOAD_TEXT, labels),
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    _, command = command_record(settings, printed["partition"], printed["job_id"])
    assert command.body.payload.data == PAYLOAD_TEXT.encode()  # type: ignore[attr-defined]
    assert command.body.labels == labels  # type: ignore[attr-defined]
