"""Which partition a key lands in: Kafka's murmur2, bit for bit as the Java client computes it.

``commands`` and ``events`` are co-partitioned by job id with this function; it is what the Java
producer's default partitioner, librdkafka's ``partitioner=murmur2_random`` and every
"Java-compatible" partitioner in other languages compute, so a job's records from any producer
land in the same partition p of both topics.
"""

from __future__ import annotations

import struct

from engine.errors import ValidationError

SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: a signed 32-bit int, exactly as Java returns it."""
    length = len(data)
    h = SEED ^ length
    tail = length & ~3
    for k in struct.unpack_from(f"<{length >> 2}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h = ((h ^ data[tail]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: str | bytes, num_partitions: int) -> int:
    """The partition of a keyed record: ``toPositive(murmur2(key)) % num_partitions``, key UTF-8."""
    if num_partitions < 1:
        raise ValidationError(f"num_partitions must be at least 1, got {num_partitions}", "num_partitions")
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return (murmur2(data) & 0x7FFFFFFF) % num_partitions
