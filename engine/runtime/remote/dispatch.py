"""The dispatch record: what a remote worker needs to run one attempt, written with its ``JobStarted``.

One JSON record per attempt on ``<ns>.dispatch.<pool>``, keyed by the job id, produced in the
partition's transaction that records the attempt's ``JobStarted`` (so a job is dispatched exactly
when the log says it started, and an aborted start dispatches nothing to a ``read_committed``
worker). The format is documented in docs/workers.md for workers in other languages. Pure.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from engine.contract import messages as m
from engine.errors import DecodeError
from engine.runtime.execution.outputs import OutputRecord

_s: Callable[[str], str] = encode_basestring_ascii
"""A string as ``json.dumps`` writes it (quoted, escaped, ASCII)."""

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
    """The record's value: exactly what ``json.dumps`` of its fields gives (compact, ASCII), assembled field by field
    (one per job the owner starts remote: a third of the cost of building a dict and dumping it)."""
    p = d.payload
    deps = "" if d.dependencies is None else ',"dependencies":' + json.dumps(
        {job: [status, _b64(result), error] for job, (status, result, error) in d.dependencies.items()},
        separators=(",", ":"))
    return (f'{{"format":{FORMAT},"job_id":{_s(d.job_id)},"tenant":{_s(d.tenant)},"task_type":{_s(d.task_type)},'
            f'"attempt":{d.attempt:d},"epoch":{d.epoch:d},"replays":{d.replays:d},"partition":{d.partition:d},'
            f'"fencing_token":{d.fencing_token:d},"lane":{_s(d.lane)},"pool":{_s(d.pool)},'
            f'"lease_s":{_f(d.lease_s)},"timeout_s":{_f(d.timeout_s)},"dispatched_at_us":{d.dispatched_at_us:d},'
            f'"idempotency_key":{_opt(d.idempotency_key)},"traceparent":{_opt(d.traceparent)},'
            f'"payload":{{"data":"{base64.b64encode(p.data).decode()}","content_type":{_s(p.content_type)},'
            f'"schema_name":{_s(p.schema_name)},"schema_version":{p.schema_version:d}}}{deps}}}').encode()


def _opt(value: str | None) -> str:
    return "null" if value is None else _s(value)


def _f(value: float) -> str:
    """A float as ``json.dumps`` writes it."""
    return repr(float(value)) if math.isfinite(value) else json.dumps(value)


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
