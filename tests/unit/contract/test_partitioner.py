"""Where a job lands: Kafka's murmur2 partitioner, bit for bit, and the job ids it is fed."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.contract.ids import (
    IDEMPOTENCY_KEY_NAMESPACE, OCCURRENCE_NAMESPACE, job_id_for_key, new_command_id, new_event_id,
    new_job_id, occurrence_job_id, validate_task_type, validate_tenant_id,
)
from engine.contract.partitioner import murmur2, partition_for
from engine.errors import ValidationError

# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka, src/rdmurmur2.c, unittest_murmur2 (java_murmur2_results, as int32 bit patterns):
# covers every tail length (0-3 bytes) and the empty key.
LIBRDKAFKA_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}


def int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def java_murmur2(data: bytes) -> int:
    """A line-by-line transcription of Kafka's Utils.murmur2, with Java's int32 wrap-around."""
    length, m, r = len(data), int32(0x5BD1E995), 24
    h = int32(int32(0x9747B28C) ^ length)
    signed = [b - 256 if b > 127 else b for b in data]  # Java bytes are signed
    for i in range(length // 4):
        i4 = i * 4
        k = int32((signed[i4] & 0xFF) + ((signed[i4 + 1] & 0xFF) << 8)
                  + ((signed[i4 + 2] & 0xFF) << 16) + ((signed[i4 + 3] & 0xFF) << 24))
        k = int32(k * m)
        k = int32(k ^ ((k & 0xFFFFFFFF) >> r))
        k = int32(k * m)
        h = int32(h * m)
        h = int32(h ^ k)
    rest, base = length % 4, length & ~3
    if rest >= 3:
        h = int32(h ^ ((signed[base + 2] & 0xFF) << 16))
    if rest >= 2:
        h = int32(h ^ ((signed[base + 1] & 0xFF) << 8))
    if rest >= 1:
        h = int32(h ^ (signed[base] & 0xFF))
        h = int32(h * m)
    h = int32(h ^ ((h & 0xFFFFFFFF) >> 13))
    h = int32(h * m)
    return int32(h ^ ((h & 0xFFFFFFFF) >> 15))


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_the_java_client(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("data", "expected"), LIBRDKAFKA_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_librdkafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == int32(expected)


@given(st.binary(max_size=64))
def test_murmur2_equals_a_literal_transcription_of_java(data: bytes) -> None:
    assert murmur2(data) == java_murmur2(data)


# toPositive(h) = h & 0x7fffffff, then % n; e.g. "21": -973932308 & 0x7fffffff = 1173551340.
@pytest.mark.parametrize(("key", "counts"), [
    ("21", {1: 0, 6: 0, 12: 0, 64: 44}),            # 1173551340
    ("foobar", {1: 0, 6: 0, 12: 6, 64: 62}),        # 1357151166
    ("abc", {1: 0, 6: 3, 12: 3, 64: 27}),           # 479470107 (positive: unchanged)
    ("a-little-bit-long-string", {3: 2, 6: 2, 12: 8, 64: 32}),  # 1161502112
])
def test_partition_for_known_keys(key: str, counts: dict[int, int]) -> None:
    positive = murmur2(key.encode()) & 0x7FFFFFFF
    for n, expected in counts.items():
        assert positive % n == expected
        assert partition_for(key, n) == expected


def test_partition_uses_to_positive_not_abs() -> None:
    # abs(-973932308) % 6 == 2, but the Java client clears the sign bit: partition 0.
    assert abs(murmur2(b"21")) % 6 == 2
    assert partition_for("21", 6) == 0


@given(st.text(max_size=50), st.integers(1, 500))
def test_str_keys_are_partitioned_as_their_utf8_bytes(key: str, n: int) -> None:
    p = partition_for(key, n)
    assert p == partition_for(key.encode("utf-8"), n)
    assert 0 <= p < n


def test_partition_count_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="num_partitions"):
        partition_for("k", 0)


# --- job ids: what the partitioner is fed ------------------------------------------------------


def test_namespaces_are_derived_as_documented() -> None:
    assert IDEMPOTENCY_KEY_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "urn:epochq:job-id:idempotency-key")
    assert OCCURRENCE_NAMESPACE == uuid.uuid5(uuid.NAMESPACE_URL, "urn:epochq:job-id:schedule-occurrence")


def test_job_id_for_key_is_pinned_and_tenant_scoped() -> None:
    # The values docs/contract.md gives to producers in other languages.
    assert job_id_for_key("tenant-a", "order-42") == "36a0f583-2cd5-59ff-a8c3-33ff32e50eed"
    assert job_id_for_key("tenant-a", "order-42") == str(
        uuid.uuid5(IDEMPOTENCY_KEY_NAMESPACE, "tenant-a\x1forder-42"))
    assert job_id_for_key("tenant-b", "order-42") != job_id_for_key("tenant-a", "order-42")


def test_duplicates_with_one_key_land_in_one_partition() -> None:
    first, again = job_id_for_key("tenant-a", "order-42"), job_id_for_key("tenant-a", "order-42")
    assert first == again and partition_for(first, 12) == partition_for(again, 12)


def test_occurrence_job_id_is_pinned() -> None:
    assert occurrence_job_id("sched-1", 1_700_000_000_000_000) == "a2c546b3-addc-56d2-9ec1-3303e66c269f"
    assert occurrence_job_id("sched-1", 1) != occurrence_job_id("sched-1", 2)
    with pytest.raises(ValidationError, match="occurrence_us"):
        occurrence_job_id("sched-1", True)  # type: ignore[arg-type]


def test_fresh_ids_are_distinct_uuid_strings() -> None:
    ids = {new_job_id(), new_event_id(), new_command_id(), new_job_id()}
    assert len(ids) == 4 and all(uuid.UUID(i).version == 4 for i in ids)


@pytest.mark.parametrize(("value", "problem"), [
    ("", "must not be empty"),
    ("x" * 201, "201 characters long"),
    ("tab\there", "control character"),
    ("unit\x1fsep", "control character"),
    ("del\x7f", "control character"),
    (42, "must be a string"),
])
def test_names_are_validated_and_the_error_names_the_field(value: object, problem: str) -> None:
    with pytest.raises(ValidationError, match=f"tenant_id.*{problem}"):
        validate_tenant_id(value)
    with pytest.raises(ValidationError, match=f"task_type.*{problem}"):
        validate_task_type(value)


def test_valid_names_pass_through() -> None:
    assert validate_tenant_id("x" * 200) == "x" * 200
    assert validate_task_type("email.send/v2 ü") == "email.send/v2 ü"


def test_derived_ids_reject_bad_tenants_and_keys() -> None:
    with pytest.raises(ValidationError, match="tenant_id"):  # so tenant US key splits one way only
        job_id_for_key("tenant-a\x1fb", "c")
    with pytest.raises(ValidationError, match="idempotency_key"):
        job_id_for_key("tenant-a", "")
