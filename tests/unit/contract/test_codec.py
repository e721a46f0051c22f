"""The single-object Avro codec: round trips, schema evolution, interop with plain fastavro, errors."""

from __future__ import annotations

import copy
import dataclasses
import functools
import io
import json
import tempfile
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.contract import codec
from engine.contract.codec import (
    HEADER_SIZE, MAGIC, MessageCodec, SchemaCatalog, decode_command, decode_command_at, decode_event,
    decode_event_at, decode_tenant, encode_command, encode_event, encode_tenant,
)
from engine.contract.versions import strip_logical_types
from engine.contract.ids import job_id_for_key
from engine.contract.messages import (
    COMMAND_BODIES, EVENT_BODIES, CancelJob, Command, CommandQuarantined, CommandRefused,
    DuplicateSubmitted, Event, JobCancelled, JobDeadLettered, JobFailed, JobQueued, JobRejected,
    JobReplayed, JobRequeued, JobRetryScheduled, JobScheduled, JobStarted, JobSubmitted,
    JobSucceeded, OwnershipClaimed, Payload, ReplayDeadJob, SubmitJob, TenantConfig,
)
from engine.contract.messages import (
    BreakerClosed, BreakerHalfOpened, BreakerOpened, ChildReported, JobCancelRequested, JobFannedOut,
    JobProgressed, JobRescheduled, JobSettled, PauseTaskType, ResumeTaskType, TaskTypePaused, TaskTypeResumed,
    OccurrenceSkipped, PauseSchedule, RemoveSchedule, ReportChild, ReportOccurrence, RescheduleJob,
    ResumeSchedule, ScheduleArmed, ScheduleFired, SchedulePaused, ScheduleRemoved, ScheduleResumed,
    ScheduleUpserted, UpsertSchedule,
)
from engine.contract.messages import (
    AwaitJob, DependenciesAwaited, DependencyReported, DependentAdded, ReportDependency, ReportAttempt,
    ClearRateLimit, JobReprioritized, RateLimitCleared, RateLimitSet, ReprioritizeJob, SetRateLimit,
)
from engine.contract.partitioner import murmur2, partition_for
from engine.errors import DecodeError, UnknownTypeError, ValidationError

T0 = 1_700_000_000_123_456
PAYLOAD = Payload(b'{"to": "a@example.org"}', "application/json", "email.v2", 2)

COMMAND_SAMPLES = [
    SubmitJob("email.send", PAYLOAD),
    SubmitJob("report.build", Payload(b"\x00\xff"), 9, T0 + 5, "order-7", "BATCH", 3),
    CancelJob("no longer needed", "ops@example.org"),
    CancelJob(),
    ReplayDeadJob("fixed the bug", "alice"),
    SubmitJob("sync", PAYLOAD, labels={"team": "crm"}, scope="product:crm", parent_job_id="p-1"),
    ReportChild("p-1", "c-1", "acme", "dead", "boom"),
    RescheduleJob(T0 + 9, "later"),
    UpsertSchedule("nightly", "acme", "report.build", "0 2 * * *", PAYLOAD, "Europe/Berlin", 3, False,
                   "catch_up", 4, "both"),
    PauseSchedule("nightly", "holiday"),
    ResumeSchedule("nightly"),
    RemoveSchedule("nightly", "gone"),
    ReportOccurrence("nightly", T0, "job-9", "completed"),
    PauseTaskType("email.send", "smtp maintenance", "ops"),
    ResumeTaskType("email.send"),
    SetRateLimit("email.send", 12.5, 3, "smtp quota", "ops"),
    SetRateLimit("email.send", 0.1),
    ClearRateLimit("email.send", "quota lifted", "ops"),
    ReprioritizeJob(9, "vip", "ops"),
    SubmitJob("report.merge", PAYLOAD, depends_on={"job-1": "cancel", "job-2": "run"}),
    AwaitJob("job-3"),
    ReportDependency("job-1", "completed", b'{"rows": 3}'),
    ReportDependency("job-2", "unknown", None, "no such job"),
    ReportAttempt(2, (3 << 32) | 2, "succeeded", 1200, b'{"ok": true}', worker="w-1", pool="gpu",
                  records=b'[{"topic":"out","key":"az0=","value":null,"headers":[]}]'),
    ReportAttempt(1, (3 << 32) | 1, "failed", 50, None, "RuntimeError", "boom", "Traceback...", True, "w-2", "gpu"),
]

EVENT_SAMPLES = [
    OwnershipClaimed(3, "engine-a"),
    JobSubmitted("email.send", PAYLOAD, 5, "NORMAL", 5),
    JobSubmitted("email.send", PAYLOAD, 0, "BATCH", 1, T0 + 1, "key-1", 42),
    JobRejected("email.send", "queue_full", "tenant depth 10000", 10_000),
    JobRejected("nope", "unknown_task_type"),
    DuplicateSubmitted("key-1", "cmd-9"),
    JobScheduled(T0 + 60_000_000),
    JobQueued("submitted"),
    JobStarted(1, T0, "worker-1"),
    JobSucceeded(1, 12_345, b"result"),
    JobSucceeded(2, 1),
    JobFailed(1, "TimeoutError", "took too long", 30_000_000, "Traceback ...", False),
    JobRetryScheduled(2, T0 + 2_000_000),
    JobDeadLettered("max_attempts", 5),
    JobCancelled("user asked", "bob"),
    JobReplayed("fixed", "carol"),
    JobRequeued(6, 2),
    CommandRefused("CancelJob", "succeeded", "job already finished"),
    CommandQuarantined("epochq.commands", 4, 1234, "bad magic", b"\x00garbage"),
    JobStarted(2, T0, "worker-2", 1_000_000),
    BreakerOpened("email.send", 5, T0 + 30_000_000, "5 failures within 60s"),
    BreakerHalfOpened("email.send", "job-3", "cool-down passed"),
    BreakerClosed("email.send", "probe succeeded"),
    JobFannedOut("product:crm", {"acme": "c-1", "beta": "c-2"}),
    ChildReported("c-1", "acme", "completed"),
    JobSettled(1, 1, "partial"),
    JobRescheduled(T0 + 5, "moved"),
    JobCancelRequested(2, "no longer needed", "ops"),
    JobProgressed(2, 0.25, "a quarter"),
    JobProgressed(3),
    TaskTypePaused("email.send", "smtp maintenance", "ops"),
    TaskTypeResumed("email.send"),
    RateLimitSet("email.send", 12.5, 3, 480_000, 1, "smtp quota", "ops"),
    RateLimitCleared("email.send"),
    JobReprioritized(9, 2, "HIGH", "vip", "ops"),
    DependenciesAwaited(2),
    DependentAdded("job-3"),
    DependencyReported("job-1", "completed", b'{"rows": 3}'),
    DependencyReported("job-2", "dead", None, "ValueError: boom"),
    ScheduleUpserted("nightly", "acme", "report.build", "0 2 * * *", PAYLOAD),
    SchedulePaused("nightly", "holiday"),
    ScheduleResumed("nightly"),
    ScheduleRemoved("nightly"),
    ScheduleArmed("nightly", T0 + 86_400_000_000),
    ScheduleFired("nightly", T0, "job-9"),
    OccurrenceSkipped("nightly", T0, "misfire: skip"),
]


def command(body: Any, **kw: Any) -> Command:
    return Command("cmd-1", "job-1", "tenant-a", T0, body, **kw)


def event(body: Any, **kw: Any) -> Event:
    return Event("evt-1", "job-1", "tenant-a", 7, "engine-a", T0, body, **kw)


def shipped_schema(subject: str, version: int | None = None) -> dict[str, Any]:
    """The newest shipped schema of ``subject`` (or the given version)."""
    wanted = version if version is not None else codec.catalog(subject).current.version
    text = (resources.files("engine.schemas") / f"v{wanted}" / f"{subject}.avsc").read_text("utf-8")
    return json.loads(text)


def single_object(schema: dict[str, Any], datum: Any) -> bytes:
    """A single-object record written by plain fastavro, header built by hand."""
    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return b"\xc3\x01" + fp + buf.getvalue()


def branch(schema: dict[str, Any], name: str) -> dict[str, Any]:
    body = next(f for f in schema["fields"] if f["name"] == "body")
    return next(b for b in body["type"] if b["name"] == name)


def write_schema(root: Path, version: str, subject: str, schema: dict[str, Any]) -> None:
    (root / version).mkdir(parents=True, exist_ok=True)
    (root / version / f"{subject}.avsc").write_text(json.dumps(schema), "utf-8")


# --- round trips -----------------------------------------------------------------------------


def test_samples_cover_every_body_class() -> None:
    assert {type(b) for b in COMMAND_SAMPLES} == set(COMMAND_BODIES.values())
    assert {type(b) for b in EVENT_SAMPLES} == set(EVENT_BODIES.values())


@pytest.mark.parametrize("body", COMMAND_SAMPLES, ids=lambda b: type(b).__name__)
def test_every_command_round_trips(body: Any) -> None:
    original = command(body, correlation_id="corr-1")
    raw = encode_command(original)
    assert raw[:HEADER_SIZE] == MAGIC + codec.catalog("command").current.fingerprint
    assert decode_command(raw) == original


@pytest.mark.parametrize("body", EVENT_SAMPLES, ids=lambda b: type(b).__name__)
def test_every_event_round_trips(body: Any) -> None:
    original = event(body, causation_id="cmd-1", correlation_id="corr-1")
    raw = encode_event(original)
    assert raw[:HEADER_SIZE] == MAGIC + codec.catalog("event").current.fingerprint
    decoded = decode_event(raw)
    assert decoded == original
    assert decoded.type == type(body).__name__


def test_partition_level_event_without_job_round_trips() -> None:
    claim = Event("evt-2", None, None, 8, "engine-b", T0, OwnershipClaimed(0, "engine-b"))
    assert decode_event(encode_event(claim)) == claim


def test_timestamps_stay_int_microseconds() -> None:
    decoded = decode_event(encode_event(event(JobScheduled(T0 + 1))))
    assert type(decoded.occurred_at) is int and decoded.occurred_at == T0
    assert type(decoded.body.due_at) is int  # type: ignore[union-attr]


def test_tenant_config_round_trips_from_dataclass_or_dict() -> None:
    config = TenantConfig("tenant-a", T0, 2.5, 10_000, "pro")
    raw = encode_tenant(config)
    assert decode_tenant(raw) == config
    assert encode_tenant(dataclasses.asdict(config)) == raw
    assert decode_tenant(encode_tenant({"tenant_id": "b", "updated_at": 1})) == TenantConfig("b", 1)


def test_bytes_like_input_decodes() -> None:
    raw = encode_event(event(JobQueued("due")))
    assert decode_event(bytearray(raw)) == decode_event(memoryview(raw)) == decode_event(raw)


def test_generic_encode_decode_use_short_body_names() -> None:
    datum = {"command_id": "c", "job_id": "j", "tenant_id": "t", "issued_at": T0,
             "body": ("CancelJob", {"reason": "r", "requested_by": "me"})}
    raw = codec.encode("command", datum)
    assert decode_command(raw) == Command("c", "j", "t", T0, CancelJob("r", "me"))
    assert codec.decode("command", raw) == {**datum, "correlation_id": None}
    full = ("io.epochq.command.CancelJob", {"reason": "r", "requested_by": "me"})
    assert codec.encode("command", {**datum, "body": full}) == raw


def test_generic_encode_is_strict_about_field_names() -> None:
    with pytest.raises(ValidationError, match="tenant_idd"):
        codec.encode("tenant", {"tenant_id": "a", "updated_at": 1, "tenant_idd": "x"})
    with pytest.raises(ValidationError, match="cannot encode a tenant record"):
        codec.encode("tenant", {"tenant_id": "a"})


def test_encoding_a_wrong_message_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="SubmitJob is not a event body"):
        encode_event(event(SubmitJob("t", PAYLOAD)))
    with pytest.raises(ValidationError, match="priority"):
        encode_command(command(SubmitJob("t", PAYLOAD, priority="high")))  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="cannot encode Event as a command"):
        encode_command(event(JobQueued("x")))  # type: ignore[arg-type]


# --- the contract: schemas and classes agree ------------------------------------------------


@pytest.mark.parametrize(("subject", "envelope", "bodies"), [
    ("command", Command, COMMAND_BODIES), ("event", Event, EVENT_BODIES), ("tenant", TenantConfig, {}),
])
def test_schema_records_and_classes_have_the_same_fields(subject: str, envelope: type, bodies: dict) -> None:
    schema = shipped_schema(subject)
    names = lambda record: {f["name"] for f in record["fields"]}  # noqa: E731
    assert names(schema) == {f.name for f in dataclasses.fields(envelope)}
    body_field = [f for f in schema["fields"] if f["name"] == "body"]
    branches = {b["name"]: b for b in body_field[0]["type"]} if body_field else {}
    assert set(branches) == set(bodies)
    for name, record in branches.items():
        assert names(record) == {f.name for f in dataclasses.fields(bodies[name])}, name
        for f in record["fields"]:
            if isinstance(f["type"], dict) and f["type"].get("name") == "Payload":
                assert names(f["type"]) == {f.name for f in dataclasses.fields(Payload)}


@pytest.mark.parametrize("subject", codec.SUBJECTS)
def test_stripping_logical_types_keeps_the_fingerprint(subject: str) -> None:
    schema = shipped_schema(subject)
    stripped = strip_logical_types(schema)
    assert "logicalType" in json.dumps(schema) and "logicalType" not in json.dumps(stripped)
    fp = fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")
    assert fingerprint(to_parsing_canonical_form(stripped), "CRC-64-AVRO") == fp
    assert codec.catalog(subject).current.fingerprint.hex() == fp


def test_fingerprint_is_little_endian_crc64_avro() -> None:
    # Avro's own test vector: CRC-64-AVRO("null") == 7195948357588979594 (a Java long).
    assert fingerprint('"null"', "CRC-64-AVRO") == (7195948357588979594).to_bytes(8, "little").hex()


# --- interop with plain fastavro ----------------------------------------------------------------


def test_plain_fastavro_record_decodes_through_the_codec() -> None:
    schema = shipped_schema("event")  # with its logical types: timestamps given as datetimes
    at = datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    datum = {"event_id": "e", "job_id": "j", "tenant_id": "t", "epoch": 2, "owner": "o",
             "occurred_at": at, "body": ("io.epochq.event.JobRetryScheduled", {"next_attempt": 3, "due_at": at})}
    micros = int(at.timestamp()) * 1_000_000 + at.microsecond
    assert decode_event(single_object(schema, datum)) == Event(
        "e", "j", "t", 2, "o", micros, JobRetryScheduled(3, micros))


def test_codec_output_decodes_with_plain_fastavro() -> None:
    original = event(JobSubmitted("t", PAYLOAD, 7, "NORMAL", 3, T0 + 9, "k"), causation_id="c")
    raw = encode_event(original)
    parsed = fastavro.parse_schema(shipped_schema("event"))
    datum = fastavro.schemaless_reader(io.BytesIO(raw[HEADER_SIZE:]), parsed, return_record_name=True)
    assert datum["occurred_at"] == datetime.fromtimestamp(T0 / 1e6, UTC)
    name, body = datum["body"]
    assert name == "io.epochq.event.JobSubmitted"
    assert body["payload"]["data"] == PAYLOAD.data and body["idempotency_key"] == "k"
    assert datum["causation_id"] == "c" and datum["epoch"] == 7


# --- schema evolution -----------------------------------------------------------------------------


def older_event_schema() -> dict[str, Any]:
    """A "v0" event schema: no causation_id, no command_offset, and fewer body branches."""
    schema = copy.deepcopy(shipped_schema("event"))
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "causation_id"]
    submitted = branch(schema, "JobSubmitted")
    submitted["fields"] = [f for f in submitted["fields"] if f["name"] != "command_offset"]
    body = next(f for f in schema["fields"] if f["name"] == "body")
    dropped = {"DuplicateSubmitted", "JobRequeued", "CommandRefused", "CommandQuarantined"}
    body["type"] = [b for b in body["type"] if b["name"] not in dropped]
    return schema


@pytest.fixture()
def evolved(tmp_path: Path) -> Path:
    """A schema directory holding v0 (older) and v1 (the shipped one), plus noise to ignore."""
    write_schema(tmp_path, "v0", "event", older_event_schema())
    write_schema(tmp_path, "v1", "event", shipped_schema("event"))
    write_schema(tmp_path, "v1", "command", shipped_schema("command"))
    (tmp_path / "drafts").mkdir()
    (tmp_path / "v9-draft").mkdir()
    return tmp_path


def test_catalog_loads_every_version_and_the_newest_is_current(evolved: Path) -> None:
    catalog = SchemaCatalog.from_dir(evolved, "event")
    assert [v.version for v in catalog.versions] == [0, 1]
    assert catalog.current.fingerprint == codec.catalog("event").current.fingerprint
    old_fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(older_event_schema()), "CRC-64-AVRO"))
    assert catalog.version_for(old_fp) is catalog.versions[0]
    datum = codec.decode("event", encode_event(event(JobQueued("x"))))
    datum["body"] = ("io.epochq.event.JobQueued", datum["body"][1])
    assert catalog.encode(datum)[:HEADER_SIZE] == catalog.current.header  # the newest writes


def test_older_writer_schema_resolves_into_the_current_reader(evolved: Path) -> None:
    codec_v01 = MessageCodec(SchemaCatalog.from_dir(evolved, "event"), Event, EVENT_BODIES)
    base = {"event_id": "e", "job_id": "j", "tenant_id": "t", "epoch": 1, "owner": "o",
            "occurred_at": T0, "correlation_id": None}
    submitted = {"task_type": "t", "payload": {"data": b"x", "content_type": "text/plain",
                 "schema_name": "", "schema_version": 1}, "priority": 4, "lane": "NORMAL",
                 "run_at": None, "idempotency_key": None, "max_attempts": 3}
    raw = single_object(older_event_schema(), {**base, "body": ("io.epochq.event.JobSubmitted", submitted)})
    assert codec_v01.decode(raw) == Event("e", "j", "t", 1, "o", T0, JobSubmitted(
        "t", Payload(b"x", "text/plain"), 4, "NORMAL", 3, command_offset=-1), causation_id=None)
    # The union lost branches before JobQueued in v0, so its index differs: resolved by name.
    raw = single_object(older_event_schema(), {**base, "body": ("io.epochq.event.JobCancelled", {
        "reason": "r", "requested_by": "u"})})
    assert codec_v01.decode(raw).body == JobCancelled("r", "u")
    with pytest.raises(DecodeError, match="unknown fingerprint"):
        decode_event(raw)  # the shipped catalog never shipped this v0


def test_writer_branch_missing_from_reader_is_an_unknown_type(tmp_path: Path) -> None:
    older = older_event_schema()
    body = next(f for f in older["fields"] if f["name"] == "body")
    body["type"].append({"type": "record", "name": "JobExploded", "fields": []})
    write_schema(tmp_path, "v0", "event", older)
    write_schema(tmp_path, "v1", "event", shipped_schema("event"))
    catalog = SchemaCatalog.from_dir(tmp_path, "event")
    raw = single_object(older, {"event_id": "e", "epoch": 1, "owner": "o", "occurred_at": T0,
                                "body": ("io.epochq.event.JobExploded", {})})
    with pytest.raises(UnknownTypeError, match="unknown type JobExploded: written with event v0") as caught:
        catalog.decode(raw)
    assert caught.value.type_name == "JobExploded"
    assert isinstance(caught.value.located("t", 0, 5), UnknownTypeError)


def test_records_that_do_not_map_to_a_class_are_decode_errors(tmp_path: Path) -> None:
    newer = copy.deepcopy(shipped_schema("event"))
    body = next(f for f in newer["fields"] if f["name"] == "body")
    body["type"].append({"type": "record", "name": "JobExploded", "fields": []})
    newer["fields"].insert(0, {"name": "shard", "type": "int", "default": 0})
    write_schema(tmp_path, "v2", "event", newer)
    typed = MessageCodec(SchemaCatalog.from_dir(tmp_path, "event"), Event, EVENT_BODIES)
    base = {"shard": 1, "event_id": "e", "epoch": 1, "owner": "o", "occurred_at": T0}
    raw = single_object(newer, {**base, "body": ("io.epochq.event.JobExploded", {})})
    with pytest.raises(DecodeError, match="unmapped body: record io.epochq.event.JobExploded"):
        typed.decode(raw)
    raw = single_object(newer, {**base, "body": ("io.epochq.event.JobQueued", {"cause": "x"})})
    with pytest.raises(DecodeError, match="unmapped record: event does not fit Event"):
        typed.decode(raw)


# --- errors -----------------------------------------------------------------------------------------


VALID = encode_event(event(JobSubmitted("t", PAYLOAD, 5, "NORMAL", 3, idempotency_key="k")))


@pytest.mark.parametrize(("raw", "reason"), [
    (b"", "empty: 0 bytes"),
    (b"\xc3", "too short: 1 of the 10 header bytes"),
    (b"\xc3\x01\x00\x01", "too short: 4 of the 10"),
    (b"{\"json\": true}", "bad magic: starts 7b22"),
    (b"\xc3\x02" + VALID[2:], "bad magic: starts c302"),
    (b"\x00" + VALID, "bad magic: starts 00c3"),
    (b"\xc3\x01" + b"\x00" * 8 + VALID[HEADER_SIZE:], "unknown fingerprint 0000000000000000"),
    (encode_command(command(CancelJob())), "unknown fingerprint " + codec.catalog("command").current.fingerprint.hex()),
    (VALID + b"\x00", "trailing bytes: 1 after the event record"),
    (VALID[:HEADER_SIZE] + b"\xff" * 40, "malformed body|truncated body"),
    (None, "no value: a null record"),
    ("text", "not bytes: got str"),
])
def test_undecodable_input_raises_decode_error_with_reason(raw: Any, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as caught:
        decode_event(raw)
    assert caught.value.topic == "?" and caught.value.offset == -1


def test_every_prefix_of_a_valid_record_is_a_decode_error() -> None:
    for body in EVENT_SAMPLES:
        raw = encode_event(event(body, causation_id="c"))
        for size in range(len(raw)):
            expected = "empty" if size == 0 else "too short" if size < HEADER_SIZE else "truncated body"
            with pytest.raises(DecodeError, match=expected):
                decode_event(raw[:size])


def test_located_errors_name_topic_partition_and_offset() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_event_at(VALID[:20], "epochq.events", 3, 42)
    error = caught.value
    assert (error.topic, error.partition, error.offset) == ("epochq.events", 3, 42)
    assert "epochq.events[3]@42" in str(error) and "truncated body" in str(error)
    assert isinstance(error.__cause__, EOFError)
    with pytest.raises(DecodeError, match=r"cannot decode epochq\.commands\[0\]@7: bad magic"):
        decode_command_at(b"garbage", "epochq.commands", 0, 7)
    assert decode_command_at(encode_command(command(CancelJob())), "t", 0, 0).body == CancelJob()


def test_decode_error_located_keeps_the_reason() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_event(b"")
    located = caught.value.located("epochq.events", 1, 2)
    assert located.reason == caught.value.reason
    assert str(located).startswith("cannot decode epochq.events[1]@2: empty")


_HEADER = VALID[:HEADER_SIZE]
_arbitrary = st.one_of(
    st.binary(max_size=400),
    st.binary(max_size=400).map(lambda b: _HEADER + b),
    st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)).map(
        lambda p: VALID[: p[0]] + bytes([p[1]]) + VALID[p[0] + 1:]),
    st.integers(0, len(VALID)).map(lambda n: VALID[:n]),
)


@settings(max_examples=600, deadline=None)
@given(_arbitrary)
def test_decode_returns_an_event_or_raises_decode_error(raw: bytes) -> None:
    try:
        result = decode_event(raw)
    except DecodeError:
        return
    assert isinstance(result, Event)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200).map(lambda b: encode_command(command(CancelJob()))[:HEADER_SIZE] + b))
def test_decode_command_returns_a_command_or_raises_decode_error(raw: bytes) -> None:
    try:
        assert isinstance(decode_command(raw), Command)
    except DecodeError:
        pass


def test_the_worked_example_in_docs_contract_md_is_byte_exact() -> None:
    job_id = job_id_for_key("acme", "order-42")
    example = Command("0b4f2a4e-3f3b-4c8e-9d6e-1a2b3c4d5e6f", job_id, "acme", 1_700_000_000_000_000,
                      SubmitJob("email.send", Payload(b'{"to":"a@b.c"}'), idempotency_key="order-42"))
    v1 = codec.catalog("command").versions[0]
    assert v1.version == 1
    raw = MessageCodec(SchemaCatalog("command", [v1]), Command, COMMAND_BODIES).encode(example)  # a v1 producer
    assert job_id == "08407376-04b4-539a-a175-3fad6b2c6700"
    assert raw == bytes.fromhex(  # the hex dump in docs/contract.md
        "c3 01 25 33 19 b1 14 47 2c f4 48 30 62 34 66 32"
        "61 34 65 2d 33 66 33 62 2d 34 63 38 65 2d 39 64"
        "36 65 2d 31 61 32 62 33 63 34 64 35 65 36 66 48"
        "30 38 34 30 37 33 37 36 2d 30 34 62 34 2d 35 33"
        "39 61 2d 61 31 37 35 2d 33 66 61 64 36 62 32 63"
        "36 37 30 30 08 61 63 6d 65 80 80 f2 81 83 89 85"
        "06 00 00 14 65 6d 61 69 6c 2e 73 65 6e 64 1c 7b"
        "22 74 6f 22 3a 22 61 40 62 2e 63 22 7d 20 61 70"
        "70 6c 69 63 61 74 69 6f 6e 2f 6a 73 6f 6e 00 02"
        "0a 00 02 10 6f 72 64 65 72 2d 34 32 00 00"
    )
    assert (murmur2(job_id.encode()), partition_for(job_id, 12)) == (-117565854, 2)


# --- the generated fast path: same bytes as fastavro, same messages, total on any input ---------------


def field_values(node: Any, records: dict[str, dict[str, Any]], classes: dict[str, type]) -> st.SearchStrategy[Any]:
    """Arbitrary Python values for an Avro schema node (records as their dataclasses)."""
    kind = node.get("type") if isinstance(node, dict) else node
    simple = {
        "string": st.text(max_size=90), "bytes": st.binary(max_size=300), "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1), "long": st.integers(-(2**63), 2**63 - 1),
        "double": st.floats(allow_nan=False), "null": st.none(),
    }
    if isinstance(node, list):
        return st.one_of(*(field_values(n, records, classes) for n in node))
    if kind in simple:
        return simple[kind]
    if kind == "map":
        return st.dictionaries(st.text(max_size=20), field_values(node["values"], records, classes), max_size=4)
    record = records[node] if isinstance(node, str) else node
    cls = classes[record["name"].rsplit(".", 1)[-1]]
    return st.builds(cls, **{f["name"]: field_values(f["type"], records, classes) for f in record["fields"]})


@functools.cache
def messages(subject: str) -> st.SearchStrategy[Any]:
    """Arbitrary messages of one subject: every body type, any field values the schema allows."""
    from engine.contract.records import records_of

    schema = codec.catalog(subject).current.parsed
    classes = {**COMMAND_BODIES, **EVENT_BODIES, "Payload": Payload, "CommandEnvelope": Command,
               "EventEnvelope": Event, "TenantConfig": TenantConfig}
    return field_values(schema, records_of(schema), classes)


def as_datum(value: Any, node: Any = None) -> Any:
    """A message as the plain dict plain fastavro writes: bodies as (record full name, dict)."""
    if dataclasses.is_dataclass(value):
        datum = {f.name: as_datum(getattr(value, f.name)) for f in dataclasses.fields(value)}
        body = datum.get("body")
        if body is not None and dataclasses.is_dataclass(getattr(value, "body", None)):
            full = codec.catalog("event" if isinstance(value, Event) else "command").body_names()
            datum["body"] = (full[type(value.body).__name__], body)
        return datum
    return value


@functools.cache
def plain_fastavro(subject: str) -> tuple[bytes, Any]:
    """The header and the fastavro-parsed shipped schema (logical types and all) of a subject."""
    schema = shipped_schema(subject)
    return b"\xc3\x01" + bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")), \
        fastavro.parse_schema(schema)


SUBJECT_ENCODERS = {
    "command": (encode_command, decode_command), "event": (encode_event, decode_event),
    "tenant": (encode_tenant, decode_tenant),
}


@pytest.mark.parametrize("subject", codec.SUBJECTS)
@settings(max_examples=250, deadline=None)
@given(data=st.data())
def test_fast_path_writes_what_plain_fastavro_writes_and_reads_it_back(subject: str, data: st.DataObject) -> None:
    message = data.draw(messages(subject))
    encode, decode = SUBJECT_ENCODERS[subject]
    raw = encode(message)
    header, parsed = plain_fastavro(subject)
    plain = io.BytesIO()
    fastavro.schemaless_writer(plain, parsed, as_datum(message))
    assert raw == header + plain.getvalue()
    assert raw == codec._codec(subject).encode_general(message)
    assert decode(raw) == message == codec._codec(subject).decode_general(raw)
    assert type(decode(raw)) is type(message)


def test_every_body_type_has_a_generated_writer_and_the_reader_is_generated() -> None:
    for subject, bodies in (("command", COMMAND_BODIES), ("event", EVENT_BODIES)):
        typed = codec._codec(subject)
        assert set(typed._writers) == set(bodies.values()) and typed._reader is not None
    assert set(codec._codec("tenant")._writers) == {TenantConfig}


@pytest.mark.parametrize(("body", "value"), [
    (JobSucceeded(1, 5, bytearray(b"ok")), "bytearray"),  # not exactly bytes: fastavro writes it
    (JobRequeued(True, 2), "bool as long"),
    (JobQueued("submitted"), "plain"),
])
def test_values_the_fast_writer_leaves_to_fastavro_come_out_the_same(body: Any, value: str) -> None:
    message = event(body)
    assert encode_event(message) == codec._codec("event").encode_general(message), value


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, "7", None])
def test_longs_that_do_not_fit_are_validation_errors(bad: Any) -> None:
    with pytest.raises(ValidationError, match="cannot encode a event record"):
        encode_event(dataclasses.replace(event(JobQueued("x")), epoch=bad))
    with pytest.raises(ValidationError, match="cannot encode a event record"):
        encode_event(event(JobRequeued(bad, 1)))


def test_event_ids_need_not_be_uuids() -> None:
    for event_id in ("3.12.98765", "", "p" * 500, "ünïcode-id"):
        message = Event(event_id, "job", None, 1, "engine", T0, JobQueued("due"))
        assert decode_event(encode_event(message)) == message


def test_every_prefix_of_a_command_is_a_decode_error() -> None:
    for body in COMMAND_SAMPLES:
        raw = encode_command(command(body, correlation_id="c"))
        for size in range(HEADER_SIZE, len(raw)):
            with pytest.raises(DecodeError, match="truncated body"):
                decode_command(raw[:size])


def zigzag_varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while z > 0x7F:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes(out + bytes([z]))


EVENT_HEADER = codec.catalog("event").current.header


@pytest.mark.parametrize(("body", "reason"), [
    (zigzag_varint(2**60) + b"x", "truncated body.*Expected 1152921504606846976 bytes, read 1"),
    (zigzag_varint(-5), "malformed body.*negative length -5"),
    (b"\x80" * 11 + b"\x01", "malformed body.*varint longer than 10 bytes"),
    (b"\x02e\x04", "malformed body.*union index 2 names no branch"),
    (b"\x04\xff\xfe", "malformed body.*UnicodeDecodeError"),
])
def test_corrupt_bodies_say_what_is_wrong_without_allocating_it(body: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode_event(EVENT_HEADER + body)


def test_a_huge_map_count_is_refused_before_looping() -> None:
    raw = encode_event(event(JobFannedOut("scope", {})))
    count_at = len(raw) - 1  # the empty map's 0 is the last byte
    with pytest.raises(DecodeError, match="block of 1152921504606846976 entries"):
        decode_event(raw[:count_at] + zigzag_varint(2**60) + b"\x00")


def test_map_blocks_with_byte_sizes_are_read() -> None:
    """Negative block counts (count, then the block's size) are valid Avro; Java may write them."""
    raw = encode_event(event(JobFannedOut("scope", {"a": "1", "b": "2"})))
    plain = encode_event(event(JobFannedOut("scope", {})))[:-1]
    blocks = zigzag_varint(-1) + zigzag_varint(4) + b"\x02a\x021" + zigzag_varint(1) + b"\x02b\x022\x00"
    assert decode_event(plain + blocks) == decode_event(raw)


ALL_VALID = [encode_event(event(b, causation_id="c")) for b in EVENT_SAMPLES] + [
    encode_command(command(b, correlation_id="c")) for b in COMMAND_SAMPLES]


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from(ALL_VALID), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
       st.integers(0, 3))
def test_mutated_records_decode_or_raise_decode_error(raw: bytes, edits: list[tuple[int, int]], cut: int) -> None:
    mutated = bytearray(raw)
    for at, byte in edits:
        mutated[HEADER_SIZE + at % (len(raw) - HEADER_SIZE)] = byte
    mutated = mutated[: len(mutated) - cut]
    for decode, kind in ((decode_event, Event), (decode_command, Command)):
        try:
            assert isinstance(decode(bytes(mutated)), kind)
        except DecodeError:
            pass


def test_current_records_never_take_the_fastavro_path(monkeypatch: pytest.MonkeyPatch) -> None:
    for subject, samples in (("event", [event(b, causation_id="c") for b in EVENT_SAMPLES]),
                             ("command", [command(b) for b in COMMAND_SAMPLES])):
        typed = codec._codec(subject)
        raws = [typed.encode(m) for m in samples]
        monkeypatch.setattr(typed, "decode_general", None)
        monkeypatch.setattr(typed, "encode_general", None)
        assert [typed.decode(r) for r in raws] == samples
        assert [typed.encode(m) for m in samples] == raws


@dataclasses.dataclass(frozen=True, slots=True)
class Inner:
    n: int
    label: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Marker:
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Shapes:
    """A test envelope with what the shipped schemas do not use (yet): the generator handles it too."""

    inner: Inner | None
    marker: Marker
    by_name: dict[str, Inner]
    flag: bool
    ratio: float
    maybe_ratio: float | None
    blob: bytes | None


SHAPES_SCHEMA = {"type": "record", "name": "Shapes", "namespace": "t", "fields": [
    {"name": "inner", "type": ["null", {"type": "record", "name": "Inner", "fields": [
        {"name": "n", "type": "long"}, {"name": "label", "type": "string", "default": ""}]}]},
    {"name": "marker", "type": {"type": "record", "name": "Marker", "fields": []}},
    {"name": "by_name", "type": {"type": "map", "values": "Inner"}},
    {"name": "flag", "type": "boolean"},
    {"name": "ratio", "type": "float"},
    {"name": "maybe_ratio", "type": ["double", "null"]},
    {"name": "blob", "type": ["null", "bytes"]},
]}


@settings(max_examples=200, deadline=None)
@given(st.builds(
    Shapes, st.none() | st.builds(Inner, st.integers(-(2**63), 2**63 - 1), st.text(max_size=70)), st.just(Marker()),
    st.dictionaries(st.text(max_size=5), st.builds(Inner, st.integers(-5, 5)), max_size=3), st.booleans(),
    st.floats(width=32, allow_nan=False), st.none() | st.floats(allow_nan=False), st.none() | st.binary(max_size=80)))
def test_generated_code_handles_nested_optional_and_empty_records_maps_and_floats(shapes: Shapes) -> None:
    root = Path(tempfile.mkdtemp())
    write_schema(root, "v1", "shapes", SHAPES_SCHEMA)
    typed = shapes_codec(str(root))
    assert typed._writers and typed._reader is not None
    raw = typed.encode(shapes)
    assert raw == single_object(SHAPES_SCHEMA, dataclasses.asdict(shapes))
    assert typed.decode(raw) == shapes  # (the dict path does not map a record inside a union)


@functools.cache
def shapes_codec(root: str) -> MessageCodec[Shapes]:
    return MessageCodec(SchemaCatalog.from_dir(Path(root), "shapes"), Shapes)
