"""The jobs view: one record per job, encoded as canonical JSON so rebuilds compare byte for byte."""

from __future__ import annotations

import base64
import json
from typing import Any

from engine.contract.messages import Payload
from engine.domain.jobs import AttemptError, JobView
from engine.domain.lifecycle import JobState
from projections.views.keys import job_key

_FIELDS = JobView.__slots__


def encode_job(job: JobView) -> bytes:
    """The stored form of a job record."""
    raw: dict[str, Any] = {f: getattr(job, f) for f in _FIELDS}
    raw["state"] = job.state.value
    raw["payload"] = [_b64(job.payload.data), job.payload.content_type, job.payload.schema_name,
                      job.payload.schema_version]
    raw["result"] = _b64(job.result) if job.result is not None else None
    raw["errors"] = [[getattr(e, f) for f in AttemptError.__slots__] for e in job.errors]
    return json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()


def decode_job(raw: bytes) -> JobView:
    """A job record from its stored form."""
    d = json.loads(raw)
    data, content_type, schema_name, version = d["payload"]
    d["payload"] = Payload(base64.b64decode(data), content_type, schema_name, version)
    d["state"] = JobState(d["state"])
    d["result"] = base64.b64decode(d["result"]) if d["result"] is not None else None
    d["errors"] = tuple(AttemptError(*e) for e in d["errors"])
    return JobView(**d)


def read_job(reader: Any, job_id: str) -> JobView | None:
    """The job's record through anything with ``get(key)`` (a store or a batch)."""
    raw = reader.get(job_key(job_id))
    return decode_job(raw) if raw is not None else None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
