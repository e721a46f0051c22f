"""The jobs view: one record per job, stored as a flat marshal (version 2) tuple.

Marshal version 2 writes no object references, so equal records give equal bytes on
every machine, which rebuild verification relies on. The first element is the record
format; a store written in another format is rebuilt from the log.
"""

from __future__ import annotations

import marshal
import operator
from typing import Any

from engine.contract.messages import Payload
from engine.domain.jobs import AttemptError, JobView
from engine.domain.lifecycle import JobState
from engine.errors import ProjectionCorruptedError
from projections.views.keys import job_key

FORMAT = 2
_FIELDS = JobView.__slots__
_STATE, _PAYLOAD, _ERRORS = (_FIELDS.index(f) for f in ("state", "payload", "errors"))
_fields_of = operator.attrgetter(*_FIELDS)
_payload_of = operator.attrgetter("data", "content_type", "schema_name", "schema_version")
_error_of = operator.attrgetter(*AttemptError.__slots__)
CACHE_LIMIT = 4_000  # decoded records kept per partition: the jobs in flight, not the ones held for later


def encode_job(job: JobView) -> bytes:
    """The stored form of a job record."""
    values: list[Any] = [FORMAT, *_fields_of(job)]
    values[_STATE + 1] = job.state.value
    values[_PAYLOAD + 1] = _payload_of(job.payload)
    if job.errors:
        values[_ERRORS + 1] = tuple(_error_of(e) for e in job.errors)
    return marshal.dumps(tuple(values), 2)


def decode_job(raw: bytes) -> JobView:
    """A job record from its stored form."""
    values = list(marshal.loads(raw))
    if values[0] != FORMAT:
        raise ProjectionCorruptedError(f"job record format {values[0]!r}, expected {FORMAT}: rebuild the projection")
    del values[0]
    values[_STATE] = JobState(values[_STATE])
    values[_PAYLOAD] = Payload(*values[_PAYLOAD])
    values[_ERRORS] = tuple(AttemptError(*e) for e in values[_ERRORS])
    return JobView(*values)


def read_job(reader: Any, job_id: str) -> JobView | None:
    """The job's record through a batch (its pending record first) or a store, via the decoded cache."""
    pending = getattr(reader, "jobs", None)
    if pending is not None and job_id in pending:
        return pending[job_id]  # type: ignore[no-any-return]
    cache: dict[str, JobView] = reader.job_cache
    job = cache.get(job_id)
    if job is None:
        raw = reader.get(job_key(job_id))
        if raw is None:
            return None
        job = remember(cache, job_id, decode_job(raw))
    return job


def write_job(batch: Any, job: JobView) -> None:
    """Stage a job record in a batch; it is encoded once, when the batch commits."""
    batch.put_job(job)


def remember(cache: dict[str, JobView], job_id: str, job: JobView) -> JobView:
    """Keep ``job`` decoded in a cache bounded to CACHE_LIMIT entries (oldest out first)."""
    cache.pop(job_id, None)
    cache[job_id] = job
    if len(cache) > CACHE_LIMIT:
        del cache[next(iter(cache))]
    return job
