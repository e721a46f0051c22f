"""The dispatch record: what a remote worker needs to run one attempt, written with its ``JobStarted``.

One JSON record per attempt on ``<ns>.dispatch.<pool>``, keyed by the job id, produced in the
partition's transaction that records the attempt's ``JobStarted`` (so a job is dispatched exactly
when the log says it started, and an aborted start dispatches nothing to a ``read_committed``
worker). The format is documented in docs/workers.md for workers in other languages. Pure.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.contract import messages as m
from engine.errors import DecodeError
from engine.runtime.execution.outputs import OutputRecord

FORMAT = 1


def dispatch_topic(namespace: str, pool: str) -> str:
    """The topic the workers of ``pool`` read their attempts from."""
    return f"{namespace}.dispatch.{pool}"


@dataclass(frozen=True, slots=True)
class Dispatch:
    """One attempt dispatched to a pool: the job, the attempt, its fencing token and its lease."""

    job_id: str
    tenant: str
    task_type: str
    attempt: int
    epoch: int
    replays: int
    partition: int
    fencing_token: int
    lane: str
    payload: m.Payload
    pool: str
    lease_s: float
    timeout_s: float
    dispatched_at_us: int
    idempotency_key: str | None = None
    traceparent: str | None = None
    dependencies: Mapping[str, tuple[str, bytes | None, str]] | None = None  # how each dependency ended


def encode_dispatch(d: Dispatch) -> bytes:
    """The record's value."""
    p = d.payload
    return json.dumps({
        "format": FORMAT, "job_id": d.job_id, "tenant": d.tenant, "task_type": d.task_type, "attempt": d.attempt,
        "epoch": d.epoch, "replays": d.replays, "partition": d.partition, "fencing_token": d.fencing_token,
        "lane": d.lane, "pool": d.pool, "lease_s": d.lease_s, "timeout_s": d.timeout_s,
        "dispatched_at_us": d.dispatched_at_us, "idempotency_key": d.idempotency_key, "traceparent": d.traceparent,
        "payload": {"data": base64.b64encode(p.data).decode(), "content_type": p.content_type,
                    "schema_name": p.schema_name, "schema_version": p.schema_version},
        **({"dependencies": {job: [status, _b64(result), error] for job, (status, result, error)
                             in d.dependencies.items()}} if d.dependencies is not None else {}),
    }, separators=(",", ":")).encode()


def decode_dispatch(raw: bytes | None) -> Dispatch:
    """A dispatch record; ``DecodeError`` naming what is wrong with one that is not."""
    try:
        d: dict[str, Any] = json.loads(raw or b"")
        p = d["payload"]
        payload = m.Payload(base64.b64decode(p["data"]), str(p["content_type"]), str(p.get("schema_name", "")),
                            int(p.get("schema_version", 1)))
        return Dispatch(str(d["job_id"]), str(d["tenant"]), str(d["task_type"]), int(d["attempt"]),
                        int(d["epoch"]), int(d["replays"]), int(d["partition"]), int(d["fencing_token"]),
                        str(d["lane"]), payload, str(d["pool"]), float(d["lease_s"]), float(d["timeout_s"]),
                        int(d["dispatched_at_us"]), d.get("idempotency_key"), d.get("traceparent"),
                        {str(j): (str(st), _unb64(r), str(err)) for j, (st, r, err) in d["dependencies"].items()}
                        if d.get("dependencies") is not None else None)
    except (ValueError, KeyError, TypeError) as e:
        raise DecodeError(f"not a dispatch record: {type(e).__name__}: {e}", "dispatch") from e


@dataclass(frozen=True, slots=True)
class CancelAttempt:
    """A cancel of a running remote attempt, sent on its pool's dispatch topic under the job id (so to the partition,
    and the worker, its dispatch went to) in the transaction of its ``JobCancelRequested``."""

    job_id: str
    attempt: int
    fencing_token: int
    grace_s: float


def encode_cancel(c: CancelAttempt) -> bytes:
    """The cancel record's value: ``kind`` says it is not a dispatch."""
    return json.dumps({"format": FORMAT, "kind": "cancel", "job_id": c.job_id, "attempt": c.attempt,
                       "fencing_token": c.fencing_token, "grace_s": c.grace_s}, separators=(",", ":")).encode()


def decode_message(raw: bytes | None) -> Dispatch | CancelAttempt:
    """A record of a dispatch topic: a dispatch, or a cancel; ``DecodeError`` naming what is wrong."""
    try:
        d: dict[str, Any] = json.loads(raw or b"")
        if isinstance(d, dict) and d.get("kind") == "cancel":
            return CancelAttempt(str(d["job_id"]), int(d["attempt"]), int(d["fencing_token"]), float(d["grace_s"]))
    except (ValueError, KeyError, TypeError) as e:
        raise DecodeError(f"not a dispatch record: {type(e).__name__}: {e}", "dispatch") from e
    return decode_dispatch(raw)


def encode_records(records: Sequence[OutputRecord]) -> bytes:
    """The records a remote handler produced, as ``ReportAttempt.records`` carries them (JSON, bytes base64)."""
    return json.dumps([{"topic": r.topic, "key": _b64(r.key), "value": _b64(r.value),
                        "headers": [[name, _b64(value)] for name, value in r.headers or ()]} for r in records],
                      separators=(",", ":")).encode()


def decode_records(raw: bytes) -> tuple[OutputRecord, ...]:
    """``ReportAttempt.records`` as records to write; ``DecodeError`` naming what is wrong."""
    try:
        return tuple(OutputRecord(str(r["topic"]), _unb64(r.get("value")), _unb64(r.get("key")),
                                  tuple((str(n), _unb64(v)) for n, v in r.get("headers") or ()) or None)
                     for r in json.loads(raw))
    except (ValueError, KeyError, TypeError) as e:
        raise DecodeError(f"ReportAttempt.records: not a list of records: {type(e).__name__}: {e}",
                          "commands") from e


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value, validate=True)


def dispatch_record(namespace: str, d: Dispatch) -> OutputRecord:
    """The dispatch as a record staged in the start's transaction (``loop/effects_kafka`` writes it)."""
    return OutputRecord(dispatch_topic(namespace, d.pool), encode_dispatch(d), d.job_id.encode())
