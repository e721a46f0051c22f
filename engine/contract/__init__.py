"""The wire contract: typed commands and events, their single-object Avro codec, job ids and keys.

Everything that crosses Kafka goes through here: ``schemas/`` is the source of truth for the
bytes, :mod:`engine.contract.messages` for their Python shape, and
:func:`~engine.contract.partitioner.partition_for` for which partition a job's records live in.
"""

from __future__ import annotations

from engine.contract.codec import (
    SchemaCatalog,
    decode_command,
    decode_command_at,
    decode_event,
    decode_event_at,
    decode_tenant,
    encode_command,
    encode_event,
    encode_tenant,
)
from engine.contract.ids import (
    job_id_for_key,
    new_command_id,
    new_event_id,
    new_job_id,
    occurrence_job_id,
    validate_task_type,
    validate_tenant_id,
)
from engine.contract.messages import Command, Event, Payload, TenantConfig
from engine.contract.partitioner import murmur2, partition_for

__all__ = [
    "Command",
    "Event",
    "Payload",
    "SchemaCatalog",
    "TenantConfig",
    "decode_command",
    "decode_command_at",
    "decode_event",
    "decode_event_at",
    "decode_tenant",
    "encode_command",
    "encode_event",
    "encode_tenant",
    "job_id_for_key",
    "murmur2",
    "new_command_id",
    "new_event_id",
    "new_job_id",
    "occurrence_job_id",
    "partition_for",
    "validate_task_type",
    "validate_tenant_id",
]
