"""The pure parts of <ns>.schemas: records, listing rows, errors, the skipped-types line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
from confluent_kafka import KafkaError

from engine.contract import codec, learned
from engine.contract.learned import skipped_line
from engine.contract.messages import Event, OwnershipClaimed
from engine.contract.versions import load_version
from engine.errors import AccessDeniedError, KafkaUnavailableError, TopicMismatchError
from engine.runtime.kafka import schemas
from projections.restore import Restorer
from projections.store import open_store


def test_every_shipped_schema_is_registered_under_its_wire_order_fingerprint() -> None:
    entries = schemas.shipped()
    assert len(entries) == sum(len(codec.catalog(s).versions) for s in codec.SUBJECTS)
    v4 = next(e for e in entries if (e.subject, e.version) == ("event", 4))
    assert v4.key == "6ba8b9a6b5ba2cbb" and len(v4.key) == 16  # bytes 2-9 of every v4 event record
    newest = max((e for e in entries if e.subject == "event"), key=lambda e: e.version)
    assert codec.catalog("event").current.header[2:].hex() == newest.key
    assert load_version("event", 4, v4.text).fingerprint.hex() == v4.key


def test_rows_say_where_each_schema_appears() -> None:
    shipped = schemas.shipped()
    own = schemas.Registered("00112233445566aa", "command", 9, "{}")
    logged = {e.key: e for e in shipped[:2]} | {own.key: own}
    rows = {r.fingerprint: r for r in schemas.schema_rows(shipped, logged)}
    assert rows[shipped[0].key] == schemas.SchemaRow(shipped[0].key, "command", 1, True, True)
    assert rows[shipped[-1].key].in_log is False and rows[shipped[-1].key].shipped is True
    assert rows[own.key] == schemas.SchemaRow(own.key, "command", 9, False, True, schemas.NOT_ITS_FINGERPRINT)


def swapped(text: str) -> str:
    """``text`` (an event schema) with the first two fields' names swapped: what a poisoned entry holds."""
    schema = json.loads(text)
    a, b = schema["fields"][0]["name"], schema["fields"][1]["name"]
    schema["fields"][0]["name"], schema["fields"][1]["name"] = b, a
    return json.dumps(schema)


def test_a_schema_counts_only_under_its_own_fingerprint_and_a_poisoned_shipped_key_is_flagged_and_repaired() -> None:
    entries = schemas.shipped()
    v4 = next(e for e in entries if (e.subject, e.version) == ("event", 4))
    poisoned = schemas.Registered(v4.key, "event", 4, swapped(v4.text))
    assert v4.genuine() and not poisoned.genuine()
    assert schemas.fingerprint_of("not json") is None and schemas.fingerprint_of(v4.text) == v4.key
    reformatted = schemas.Registered(v4.key, "event", 4, json.dumps(json.loads(v4.text), indent=1))
    assert reformatted.genuine()  # the same schema, other bytes: the fingerprint holds, the copy differs
    own = schemas.Registered("00112233445566aa", "command", 9, "{}")
    logged = {e.key: e for e in entries} | {v4.key: poisoned, own.key: own}
    rows = {r.fingerprint: r for r in schemas.schema_rows(entries, logged)}
    assert rows[v4.key].problem == schemas.NOT_ITS_FINGERPRINT
    assert rows[own.key].problem == schemas.NOT_ITS_FINGERPRINT
    assert {r.fingerprint for r in rows.values() if r.problem} == {own.key, v4.key}
    assert {r.fingerprint: r.problem for r in schemas.schema_rows(entries, {v4.key: reformatted})}[v4.key] == \
        schemas.NOT_SHIPPED_COPY
    assert schemas.to_repair(entries, logged) == [v4]  # only the wrong shipped key is written again
    assert schemas.to_repair(entries, {v4.key: v4}) == [e for e in entries if e != v4]


def test_a_reader_keeps_the_newest_genuine_entry_of_a_key() -> None:
    v4 = next(e for e in schemas.shipped() if (e.subject, e.version) == ("event", 4))
    headers = {"subject": b"event", "version": b"4"}
    found: dict[str, schemas.Registered] = {}
    for text in (v4.text, swapped(v4.text)):  # the genuine entry, then a forged one under its key
        schemas._keep(found, v4.key.encode(), text.encode(), headers, genuine=True)
    assert found == {v4.key: v4}
    schemas._keep(found, v4.key.encode(), swapped(v4.text).encode(), headers)  # as listed: the newest, whatever
    assert found[v4.key].text == swapped(v4.text)


def test_a_record_of_the_topic_is_kept_and_a_tombstone_drops_it() -> None:
    found: dict[str, schemas.Registered] = {}
    schemas._keep(found, b"6ba8b9a6b5ba2cbb", b'{"type": "record"}', {"subject": b"event", "version": b"4"})
    assert found["6ba8b9a6b5ba2cbb"] == schemas.Registered("6ba8b9a6b5ba2cbb", "event", 4, '{"type": "record"}')
    schemas._keep(found, b"6ba8b9a6b5ba2cbb", None, {})
    assert found == {}


def test_a_refusal_says_which_permission_is_missing_and_a_missing_topic_what_to_run() -> None:
    denied = schemas._error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), "cannot register")
    assert isinstance(denied, AccessDeniedError) and "only engines (and admins) may write it" in str(denied)
    missing = schemas._error(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), "cannot register")
    assert isinstance(missing, TopicMismatchError) and "epochq topics ensure" in str(missing)
    assert isinstance(schemas._error(KafkaError(KafkaError._TRANSPORT), "x"), KafkaUnavailableError)


def test_the_skipped_line_names_each_type_most_first() -> None:
    assert skipped_line({"RateLimitSet": 3, "JobProgressed": 9, "TaskTypePaused": 3}) == (
        "skipped 15 record(s) of 3 type(s) this reader's schema does not have: "
        "JobProgressed x9, RateLimitSet x3, TaskTypePaused x3")


def test_an_engine_restoring_a_log_from_a_newer_release_folds_what_it_knows_and_counts_the_rest(
        tmp_path: Path) -> None:
    """This release is the "old" reader: a v5 writer (learned through a schema source) added a type."""
    newer = json.loads(codec.catalog("event").current.text)
    body = next(f for f in newer["fields"] if f["name"] == "body")
    body["type"].append({"type": "record", "name": "JobTeleported", "fields": [{"name": "to", "type": "string"}]})
    v5 = load_version("event", 5, json.dumps(newer))
    def source(fp: bytes) -> str | None:
        return v5.text if fp == v5.fingerprint else None

    learned.add_source(source)

    def record(body: tuple[str, dict[str, object]]) -> bytes:
        out = io.BytesIO()
        out.write(v5.header)
        fastavro.schemaless_writer(out, v5.parsed, {"event_id": "e", "job_id": "j-1", "tenant_id": "acme", "epoch": 1,
                                                     "owner": "o", "occurred_at": 5, "body": body})
        return out.getvalue()

    claim = Event("c", None, None, 1, "o", 1, OwnershipClaimed(0, "o"))
    store = open_store(tmp_path / "p0")
    try:
        restorer = Restorer(store, "ns.events", 0)
        restorer.feed([(0, codec.encode_event(claim)),
                       (1, record(("io.epochq.event.JobTeleported", {"to": "mars"}))),
                       (2, record(("io.epochq.event.JobQueued", {"cause": "submitted"}))),
                       (3, record(("io.epochq.event.JobTeleported", {"to": "venus"})))])
        restorer.finish()
        assert restorer.unknown_types == {"JobTeleported": 2} and restorer.set_aside == 2
        assert restorer.next_offset == 4
    finally:
        store.close()
        learned.remove_source(source)
