"""The compatibility gate: every shipped schema version reads its neighbours; forbidden changes are caught."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engine.contract import codec, learned
from engine.contract.compat import (
    check_compatible,
    reader_problems,
    resolution_problems,
    shipped_problems,
    shipped_versions,
    skipped_types,
)
from engine.contract.messages import (
    COMMAND_BODIES,
    EVENT_BODIES,
    Command,
    Event,
    JobStarted,
    JobSubmitted,
    Payload,
    RateLimitSet,
    SubmitJob,
)
from engine.errors import DecodeError, UnknownTypeError

VERSIONS = {subject: shipped_versions(subject) for subject in codec.SUBJECTS}
CONSECUTIVE = [
    pytest.param(subject, old, new, id=f"{subject}-v{old[0]}-v{new[0]}")
    for subject, versions in VERSIONS.items()
    for old, new in zip(versions, versions[1:])
]
EVERY_PAIR = [
    pytest.param(subject, writer, reader, id=f"{subject}-v{reader[0]}-reads-v{writer[0]}")
    for subject, versions in VERSIONS.items()
    for writer in versions
    for reader in versions
    if writer[0] != reader[0]
]
TO_NEWEST = [
    pytest.param(subject, old, versions[-1], id=f"{subject}-v{old[0]}-newest")
    for subject, versions in VERSIONS.items()
    for old in versions[:-1]
]


def newest(subject: str) -> dict[str, Any]:
    return copy.deepcopy(VERSIONS[subject][-1][1])


def record(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """A record of the envelope's ``body`` union, by short name (a reference into the copy)."""
    body = next(f for f in schema["fields"] if f["name"] == "body")
    return next(b for b in body["type"] if isinstance(b, dict) and b["name"] == name)


def field(rec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in rec["fields"] if f["name"] == name)


def without(rec: dict[str, Any], name: str) -> None:
    rec["fields"] = [f for f in rec["fields"] if f["name"] != name]


# --- the shipped versions -------------------------------------------------------------------------


def test_every_subject_is_shipped_and_the_codec_sees_the_same_versions() -> None:
    for subject, versions in VERSIONS.items():
        assert [v for v, _ in versions] == [v.version for v in codec.catalog(subject).versions]
    assert CONSECUTIVE, "there should be at least one evolution step to check (command v1 -> v2)"


@pytest.mark.parametrize(("subject", "old", "new"), CONSECUTIVE)
def test_consecutive_shipped_versions_are_compatible(subject: str, old: tuple[int, Any], new: tuple[int, Any]) -> None:
    assert check_compatible(old[1], new[1]) == []


@pytest.mark.parametrize(("subject", "old", "new"), TO_NEWEST)
def test_the_newest_version_reads_every_older_one(subject: str, old: tuple[int, Any], new: tuple[int, Any]) -> None:
    assert resolution_problems(old[1], new[1]) == []


@pytest.mark.parametrize(("subject", "writer", "reader"), EVERY_PAIR)
def test_every_shipped_version_reads_every_other_one_skipping_only_whole_types(
        subject: str, writer: tuple[int, Any], reader: tuple[int, Any]) -> None:
    assert reader_problems(writer[1], reader[1]) == []
    skipped = skipped_types(writer[1], reader[1])
    if writer[0] < reader[0]:
        assert skipped == [], "an older writer has no type a newer reader lacks"


def test_a_v1_event_reader_skips_the_types_v4_added_and_names_them() -> None:
    skipped = skipped_types(VERSIONS["event"][-1][1], VERSIONS["event"][0][1])
    assert {"RateLimitSet", "JobReprioritized", "JobProgressed", "BreakerOpened"} <= set(skipped)
    assert "JobSubmitted" not in skipped and "JobSucceeded" not in skipped


def test_v5_dependencies_read_as_none_by_older_readers_and_older_submits_read_as_none_today(
        log_source: Any) -> None:
    """v5 adds ``depends_on`` (a map, default empty) to SubmitJob and JobSubmitted, and five body records."""
    v4 = codec.MessageCodec(_only("event", 4), Event, EVENT_BODIES)
    submitted = Event("e-1", "j-1", "acme", 3, "o", 5,
                      JobSubmitted("echo", Payload(b"{}"), 5, "NORMAL", 3, depends_on={"j-0": "run"}))
    decoded = v4.decode(codec.encode_event(submitted))
    assert decoded.body.task_type == "echo" and decoded.body.depends_on == {}  # v4 has no such field
    skipped = skipped_types(VERSIONS["event"][-1][1], VERSIONS["event"][3][1])
    assert set(skipped) == {"DependenciesAwaited", "DependentAdded", "DependencyReported"}
    skipped = skipped_types(VERSIONS["command"][4][1], VERSIONS["command"][3][1])
    assert set(skipped) == {"AwaitJob", "ReportDependency"}
    older = v4.encode(Event("e-2", "j-2", "acme", 3, "o", 5, JobSubmitted("echo", Payload(b"{}"), 5, "NORMAL", 3)))
    assert codec.decode_event(older).body.depends_on == {}


def test_v6_a_remote_worker_s_result_is_a_body_older_readers_skip() -> None:
    """v6 adds one command body, ``ReportAttempt`` (a remote worker's result, docs/workers.md), and nothing else."""
    assert [v for v, _ in VERSIONS["command"]][-1] == 6
    skipped = skipped_types(VERSIONS["command"][-1][1], VERSIONS["command"][4][1])
    assert set(skipped) == {"ReportAttempt"}


def test_v7_the_pool_an_attempt_was_dispatched_to_round_trips_and_older_records_read_without_one(
        log_source: Any) -> None:
    """v7 of events adds ``JobStarted.pool`` (null | string, default null), and nothing else."""
    assert [v for v, _ in VERSIONS["event"]][-1] == 7
    assert skipped_types(VERSIONS["event"][-1][1], VERSIONS["event"][-2][1]) == []
    event = Event("e-1", "j-1", "acme", 1, "o", 0, JobStarted(1, 5, "w", 7, pool="gpu"))
    assert codec.decode_event(codec.encode_event(event)) == event
    read_by_v6 = codec.MessageCodec(_only("event", 6), Event, EVENT_BODIES).decode(codec.encode_event(event))
    assert read_by_v6.body == JobStarted(1, 5, "w", 7)  # a v6 reader drops it
    v6 = codec.MessageCodec(_only("event", 6), Event, EVENT_BODIES).encode(event)
    assert v6[: codec.HEADER_SIZE] != codec.catalog("event").current.header
    assert codec.decode_event(v6).body == JobStarted(1, 5, "w", 7, pool=None)  # written before v7: no pool


def test_growth_outside_the_body_union_is_a_reader_problem() -> None:
    old, new = newest("tenant"), newest("tenant")
    old["fields"].append({"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["FREE"]},
                          "default": "FREE"})
    new["fields"].append({"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["FREE", "PRO"]},
                          "default": "FREE"})
    assert reader_problems(new, old) == ["TenantConfig.tier: enum symbol(s) PRO missing (and no enum default)"]
    assert skipped_types(new, old) == []


def test_the_shipped_check_used_by_ci_is_clean() -> None:
    assert shipped_problems() == []


def test_v2_labels_round_trip_and_v1_records_read_as_empty_labels() -> None:
    labels = {"team": "billing", "région": "東京"}
    command = Command("c-1", "j-1", "acme", 1, SubmitJob("echo", Payload(b"{}"), labels=labels))
    assert codec.decode_command(codec.encode_command(command)) == command
    v1 = codec.SchemaCatalog("command", [codec.catalog("command").versions[0]])
    old = codec.MessageCodec(v1, Command, codec.COMMAND_BODIES).encode(command)
    assert old[: codec.HEADER_SIZE] == v1.current.header != codec.catalog("command").current.header
    decoded = codec.decode_command(old)
    assert decoded.body.labels == {} and decoded.body.task_type == "echo"


def test_a_reader_that_only_knows_v1_and_has_no_schema_source_refuses_v2_records() -> None:
    """Without ``<ns>.schemas`` (no source installed) a v2 fingerprint is unknown to a v1 reader."""
    v1 = codec.MessageCodec(codec.SchemaCatalog("command", codec.catalog("command").versions[:1]),
                            Command, codec.COMMAND_BODIES)
    command = Command("c-1", "j-1", "acme", 1, SubmitJob("echo", Payload(b"{}"), labels={"a": "b"}))
    with pytest.raises(DecodeError, match="unknown fingerprint"):
        v1.decode(codec.encode_command(command))


# --- what the checker catches ---------------------------------------------------------------------


def test_removing_a_field_without_default_is_caught() -> None:
    new = newest("event")
    without(record(new, "JobSubmitted"), "task_type")
    problems = check_compatible(newest("event"), new)
    assert problems == ["forward (old reads new): EventEnvelope.body<JobSubmitted>.task_type: "
                        "field removed, and the old schema has no default for it: old readers cannot read new records"]


def test_removing_a_field_with_a_default_is_allowed() -> None:
    new = newest("command")
    without(record(new, "SubmitJob"), "lane")
    assert check_compatible(newest("command"), new) == []


def test_adding_a_field_without_default_is_caught() -> None:
    new = newest("tenant")
    new["fields"].append({"name": "region", "type": "string"})
    assert check_compatible(newest("tenant"), new) == [
        "backward (new reads old): TenantConfig.region: field added without a default: "
        "records written before it cannot be read"]


@pytest.mark.parametrize(("before", "after"), [
    ("string", "int"),
    ("long", "int"),  # a narrowing: old longs do not fit
    ("int", "long"),  # a promotion: fine backward, but old int readers cannot read new longs
    ("double", "float"),
])
def test_changing_a_type_is_caught(before: str, after: str) -> None:
    old, new = newest("tenant"), newest("tenant")
    old["fields"].append({"name": "x", "type": before, "default": 0 if before != "string" else ""})
    new["fields"].append({"name": "x", "type": after, "default": 0 if after != "string" else ""})
    problems = check_compatible(old, new)
    assert problems and all("TenantConfig.x: type changed" in p for p in problems), problems


def test_an_incompatible_type_change_is_caught_in_both_directions() -> None:
    new = newest("event")
    field(new, "epoch")["type"] = "string"
    assert check_compatible(newest("event"), new) == [
        "backward (new reads old): EventEnvelope.epoch: type changed from long to string",
        "forward (old reads new): EventEnvelope.epoch: type changed from string to long",
    ]


def test_a_nested_type_change_inside_a_union_is_caught() -> None:
    new = newest("command")
    field(record(new, "SubmitJob"), "max_attempts")["type"] = ["null", "string"]
    assert check_compatible(newest("command"), new) == [
        "backward (new reads old): CommandEnvelope.body<SubmitJob>.max_attempts: union branch int is missing",
        "forward (old reads new): CommandEnvelope.body<SubmitJob>.max_attempts: union branch string is missing",
    ]


def test_a_primitive_made_optional_resolves_but_not_back() -> None:
    new = newest("command")
    field(record(new, "SubmitJob"), "priority")["type"] = ["int", "null"]
    assert check_compatible(newest("command"), new) == [
        "forward (old reads new): CommandEnvelope.body<SubmitJob>.priority: "
        "type changed from a union with null to int"]


def test_string_and_bytes_resolve_into_each_other() -> None:
    old, new = newest("tenant"), newest("tenant")
    old["fields"].append({"name": "x", "type": "string", "default": ""})
    new["fields"].append({"name": "x", "type": "bytes", "default": ""})
    assert check_compatible(old, new) == []


def test_removing_a_union_branch_is_caught_adding_one_is_allowed() -> None:
    fewer = newest("event")
    body = next(f for f in fewer["fields"] if f["name"] == "body")
    body["type"] = [b for b in body["type"] if b["name"] != "JobRequeued"]
    assert check_compatible(newest("event"), fewer) == [
        "backward (new reads old): EventEnvelope.body: union branch record JobRequeued is missing"]
    assert check_compatible(fewer, newest("event")) == []
    assert check_compatible(fewer, newest("event"), strict_growth=True) == [
        "forward (old reads new): EventEnvelope.body: union branch record JobRequeued is missing"]


def test_removing_an_enum_symbol_is_caught_unless_the_reader_has_a_default() -> None:
    old, new = newest("tenant"), newest("tenant")
    old["fields"].append({"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["FREE", "PRO"]},
                          "default": "FREE"})
    new["fields"].append({"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["FREE"]},
                          "default": "FREE"})
    assert check_compatible(old, new) == [
        "backward (new reads old): TenantConfig.tier: enum symbol(s) PRO missing (and no enum default)"]
    field(new, "tier")["type"]["default"] = "FREE"
    assert check_compatible(old, new) == []


def test_renaming_a_record_is_caught() -> None:
    new = newest("command")
    record(new, "CancelJob")["name"] = "AbortJob"
    problems = check_compatible(newest("command"), new)
    assert "backward (new reads old): CommandEnvelope.body: union branch record CancelJob is missing" in problems


def test_a_default_that_does_not_fit_its_type_is_caught() -> None:
    new = newest("command")
    record(new, "SubmitJob")["fields"].append({"name": "owner", "type": ["null", "string"], "default": "ops"})
    assert check_compatible(newest("command"), new) == [
        "new schema: CommandEnvelope.body<SubmitJob>.owner: default \"ops\" does not fit the field's type"]


def test_named_references_and_logical_types_are_followed() -> None:
    old = {"type": "record", "name": "A", "namespace": "x", "fields": [
        {"name": "p", "type": {"type": "record", "name": "P", "fields": [{"name": "n", "type": "int"}]}},
        {"name": "q", "type": "P"},
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ]}
    new = copy.deepcopy(old)
    new["fields"][0]["type"]["fields"][0]["type"] = "string"
    new["fields"][2]["type"] = "long"
    problems = check_compatible(old, new)
    assert "backward (new reads old): A.p.n: type changed from int to string" in problems
    assert "backward (new reads old): A.q.n: type changed from int to string" in problems
    assert not any(".t" in p for p in problems)


def test_recursive_schemas_terminate() -> None:
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "long"},
        {"name": "next", "type": ["null", "Node"], "default": None},
    ]}
    assert check_compatible(node, copy.deepcopy(node)) == []
    changed = copy.deepcopy(node)
    changed["fields"][0]["type"] = "int"
    assert check_compatible(node, changed) == ["backward (new reads old): Node.value: type changed from long to int"]


# --- readers built with an old version, resolving newer writers through a schema source -----------


def _only(subject: str, version: int) -> codec.SchemaCatalog:
    return codec.SchemaCatalog(subject, [v for v in codec.catalog(subject).versions if v.version == version])


def _shipped_source(fingerprint: bytes) -> str | None:
    for subject in codec.SUBJECTS:
        version = codec.catalog(subject).version_for(fingerprint)
        if version is not None:
            return version.text
    return None


@pytest.fixture
def log_source() -> Any:
    """A schema source holding every shipped schema, as ``<ns>.schemas`` does."""
    learned.add_source(_shipped_source)
    yield _shipped_source
    learned.remove_source(_shipped_source)


def test_a_v1_reader_reads_v4_events_of_the_types_it_knows_and_names_the_others(log_source: Any) -> None:
    v1 = codec.MessageCodec(_only("event", 1), Event, EVENT_BODIES)
    submitted = Event("e-1", "j-1", "acme", 3, "o", 5, JobSubmitted("echo", Payload(b"{}"), 5, "NORMAL", 3))
    decoded = v1.decode(codec.encode_event(submitted))
    assert decoded.body.task_type == "echo" and decoded.epoch == 3
    newer = Event("e-2", None, None, 3, "o", 5, RateLimitSet("echo", 2.0, 1, 500_000, 1))
    with pytest.raises(UnknownTypeError, match="unknown type RateLimitSet: written with event schema ") as caught:
        v1.decode_at(codec.encode_event(newer), "ns.events", 0, 7)
    assert caught.value.type_name == "RateLimitSet" and caught.value.offset == 7


def test_a_schema_source_is_trusted_only_for_the_fingerprint_and_subject_asked(log_source: Any) -> None:
    command = codec.catalog("command")
    wrong = codec.catalog("event").current.fingerprint
    assert command.learn(wrong) is None  # an event schema is no command schema
    liar = lambda _fp: codec.catalog("command").versions[0].text  # noqa: E731 - a source with the wrong text
    learned.remove_source(_shipped_source)
    learned.add_source(liar)
    try:
        assert _only("command", 1).learn(codec.catalog("command").current.fingerprint) is None
    finally:
        learned.remove_source(liar)
        learned.add_source(_shipped_source)


def test_a_today_reader_reads_v1_commands(log_source: Any) -> None:
    v1 = codec.MessageCodec(_only("command", 1), Command, COMMAND_BODIES)
    command = Command("c-1", "j-1", "acme", 1, SubmitJob("echo", Payload(b"{}")))
    assert codec.decode_command(v1.encode(command)).body.task_type == "echo"


def test_v5_traceparent_round_trips_and_a_v4_record_reads_without_one(log_source: Any) -> None:
    """v5 adds ``traceparent`` to SubmitJob and JobSubmitted (a W3C trace context, null by default)."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    command = Command("c-1", "j-1", "acme", 1, SubmitJob("echo", Payload(b"{}"), traceparent=parent))
    assert codec.decode_command(codec.encode_command(command)) == command
    versions = codec.catalog("command").versions
    v4 = codec.SchemaCatalog("command", [v for v in versions if v.version == 4])
    old = codec.MessageCodec(v4, Command, codec.COMMAND_BODIES).encode(command)
    assert old[: codec.HEADER_SIZE] == v4.current.header != codec.catalog("command").current.header
    assert codec.decode_command(old).body.traceparent is None
    event = Event("e-1", "j-1", "acme", 1, "a", 0, JobSubmitted("echo", Payload(b"{}"), 5, "NORMAL", 3,
                                                                traceparent=parent))
    assert codec.decode_event(codec.encode_event(event)).body.traceparent == parent  # type: ignore[union-attr]
    v4_reader = codec.MessageCodec(_only("event", 4), Event, EVENT_BODIES)
    read_by_v4 = v4_reader.decode(codec.encode_event(event))
    assert read_by_v4.body.task_type == "echo" and read_by_v4.body.traceparent is None  # type: ignore[union-attr]
