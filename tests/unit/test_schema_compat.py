"""The compatibility gate: every shipped schema version reads its neighbours; forbidden changes are caught."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engine.contract import codec
from engine.contract.compat import (
    check_compatible,
    resolution_problems,
    shipped_problems,
    shipped_versions,
)
from engine.contract.messages import Command, Payload, SubmitJob
from engine.errors import DecodeError

VERSIONS = {subject: shipped_versions(subject) for subject in codec.SUBJECTS}
CONSECUTIVE = [
    pytest.param(subject, old, new, id=f"{subject}-v{old[0]}-v{new[0]}")
    for subject, versions in VERSIONS.items()
    for old, new in zip(versions, versions[1:])
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


def test_a_reader_that_only_knows_v1_refuses_v2_records() -> None:
    """Why readers are deployed before writers: an engine without v2 quarantines v2 records."""
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
