"""<ns>.schemas: writers register their schemas; readers of any era resolve by fingerprint through it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from engine.client import Client
from engine.config import Settings
from engine.contract import codec
from engine.contract.codec import EVENT_BODIES, MessageCodec, SchemaCatalog
from engine.contract.messages import Event
from engine.contract.versions import load_version
from engine.errors import TopicMismatchError
from engine.runtime.kafka import schemas
from engine.runtime.topics import describe_topics
from tests.integration.conftest import EngineProcess, eventually, start_engine
from tests.integration.logs import JOBS, LIFE, NEWER_TYPES, read_with, write_today, write_v1


def era(version: int) -> MessageCodec[Event]:
    """An event reader built with ``version`` alone: it ships no other schema."""
    only = [v for v in codec.catalog("event").versions if v.version == version]
    return MessageCodec(SchemaCatalog("event", only), Event, EVENT_BODIES)


def test_topics_ensure_registers_every_shipped_schema(settings: Settings) -> None:
    registered = schemas.read_schemas(settings)
    assert {k: (r.subject, r.version) for k, r in registered.items()} == {
        e.key: (e.subject, e.version) for e in schemas.shipped()}
    current = codec.catalog("event").current
    assert registered[current.fingerprint.hex()].text == current.text
    info = {i.name: i for i in describe_topics(settings)}[settings.schemas_topic]
    assert info.partitions == 1 and info.config["cleanup.policy"] == "compact"
    assert schemas.publish_shipped(settings) == 0  # nothing missing: nothing written again


def test_a_v1_reader_reads_what_todays_engine_wrote_into_a_namespace_made_before_the_schemas_topic(
        settings: Settings, tmp_path: Path, engines: list[EngineProcess]) -> None:
    admin = AdminClient(settings.kafka_config())  # held until the answers are in
    for future in admin.delete_topics([settings.schemas_topic]).values():
        future.result()  # a namespace made by an epochq without <ns>.schemas
    eventually(lambda: settings.schemas_topic not in admin.list_topics(timeout=10).topics, 30, "the topic deleted")
    assert schemas.read_schemas(settings) == {}
    schemas._published.clear()  # this process registered them in the fixture's topics ensure
    with Client(settings) as client:
        with pytest.raises(TopicMismatchError, match=r"\.schemas: the topic is missing: run `epochq topics ensure`"):
            client.submit("echo", {}, tenant="acme")  # nothing written without its schema in the log
        jobs = write_today(settings, client, engines, tmp_path)  # the engine's start creates and fills it
    assert set(schemas.read_schemas(settings)) == {e.key for e in schemas.shipped()}

    types, skipped = read_with(settings, era(1))
    assert set(jobs) <= set(types)
    for job in jobs:
        assert [t for t in types[job] if t in LIFE] == LIFE, types[job]
    assert NEWER_TYPES <= set(skipped), skipped
    assert sum(skipped[t] for t in NEWER_TYPES) >= len(NEWER_TYPES)


def test_todays_reader_reads_a_namespace_written_with_v1(settings: Settings) -> None:
    jobs = write_v1(settings)
    types, skipped = read_with(settings, era(codec.catalog("event").current.version))
    assert skipped == {}
    assert {job: types[job] for job in jobs} == {job: LIFE for job in jobs}
    assert len(jobs) == JOBS


def test_schemas_list_shows_shipped_and_logged_schemas_and_where(settings: Settings) -> None:
    own = json.loads(codec.catalog("command").current.text)
    own["doc"] = "a producer's own version"
    own["fields"].append({"name": "origin", "type": "string", "default": ""})
    text = json.dumps(own)
    key = load_version("command", -1, text).fingerprint.hex()
    schemas.publish(settings, [schemas.Registered(key, "command", 17, text)])
    run = subprocess.run([sys.executable, "-m", "engine.cli.main", "schemas", "list", "--json",
                          "--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    rows = {r["fingerprint"]: r for r in json.loads(run.stdout)}
    assert rows[key] == {"fingerprint": key, "subject": "command", "version": 17, "shipped": False, "in_log": True,
                         "problem": ""}
    for e in schemas.shipped():
        assert rows[e.key] == {"fingerprint": e.key, "subject": e.subject, "version": e.version,
                               "shipped": True, "in_log": True, "problem": ""}
    table = subprocess.run([sys.executable, "-m", "engine.cli.main", "schemas", "list",
                            "--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace],
                           capture_output=True, text=True, timeout=120).stdout
    assert f"{key}  command      v17  in {settings.schemas_topic}" in table
    assert "6ba8b9a6b5ba2cbb  event         v4  shipped, in " in table


def swapped(text: str, a: str = "job_id", b: str = "tenant_id") -> str:
    """``text`` with the fields ``a`` and ``b`` of its top record swapped: a poisoned copy of a schema."""
    schema = json.loads(text)
    names = [f["name"] for f in schema["fields"]]
    i, j = names.index(a), names.index(b)
    schema["fields"][i], schema["fields"][j] = schema["fields"][j], schema["fields"][i]
    return json.dumps(schema)


def schemas_list(settings: Settings) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "engine.cli.main", "schemas", "list", "--json",
                           "--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace],
                          capture_output=True, text=True, timeout=120)


def test_a_poisoned_shipped_key_is_flagged_refused_by_readers_and_repaired_by_an_engine_s_start(
        settings: Settings, tmp_path: Path, engines: list[EngineProcess]) -> None:
    current = codec.catalog("event").current
    key = current.fingerprint.hex()
    poisoned = schemas.Registered(key, "event", current.version, swapped(current.text))
    names = [[f["name"] for f in json.loads(t)["fields"]] for t in (poisoned.text, current.text)]
    assert names[0] != names[1] and sorted(names[0]) == sorted(names[1])
    forged_only = load_version("event", -1, swapped(current.text, "owner", "event_id"))  # a key nobody registered
    schemas.publish(settings, [poisoned, schemas.Registered(forged_only.fingerprint.hex(), "event", 99,
                                                            swapped(current.text))])

    run = schemas_list(settings)
    assert run.returncode == 1, (run.stdout, run.stderr)
    rows = {r["fingerprint"]: r for r in json.loads(run.stdout)}
    assert rows[key]["problem"] == "its text does not have this fingerprint" and rows[key]["shipped"]
    assert rows[forged_only.fingerprint.hex()]["problem"] == "its text does not have this fingerprint"
    assert "2 entries of" in run.stderr and "flagged" in run.stderr

    assert schemas.read_schemas(settings, genuine=True)[key].text == current.text  # the newest genuine one
    assert forged_only.fingerprint.hex() not in schemas.read_schemas(settings, genuine=True)
    source = schemas.LogSchemas(settings)
    assert source(current.fingerprint) == current.text
    assert source(forged_only.fingerprint) is None

    engine = start_engine(engines, settings, "a", tmp_path)
    engine.wait_active(3)
    assert schemas.read_schemas(settings)[key] == schemas.Registered(key, "event", current.version, current.text)
    assert "held a wrong entry under the key of event" in engine.logs()
    run = schemas_list(settings)
    rows = {r["fingerprint"]: r for r in json.loads(run.stdout)}
    assert rows[key]["problem"] == ""  # repaired; the unshipped forgery stays flagged (an engine cannot know it)
    assert run.returncode == 1 and rows[forged_only.fingerprint.hex()]["problem"]
