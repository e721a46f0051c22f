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
    assert rows[own.key] == schemas.SchemaRow(own.key, "command", 9, False, True)


def test_a_record_of_the_topic_is_kept_and_a_tombstone_drops_it() -> None:
    found: dict[str, schemas.Registered] = {}
    schemas._keep(found, b"6ba8b9a6b5ba2cbb", b'{"type": "record"}', {"subject": b"event", "version": b"4"})
    assert found["6ba8b9a6b5ba2cbb"] == schemas.Registered("6ba8b9a6b5ba2cbb", "event", 4, '{"type": "record"}')
    schemas._keep(found, b"6ba8b9a6b5ba2cbb", None, {})
    assert found == {}


def test_a_refusal_says_which_permission_is_missing_and_a_missing_topic_what_to_run() -> None:
    denied = schemas._error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), "cannot register")
    assert isinstance(denied, AccessDeniedError) and "needs READ and WRITE" in str(denied)
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
