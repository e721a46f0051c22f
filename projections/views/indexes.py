"""The index entries a job record implies: ready queue, due index, running, dead, idempotency.

Each index is a pure function of the job record, so the fold keeps them right by deleting
the keys the old record implied and adding the ones the new record implies.
"""

from __future__ import annotations

from typing import Any

from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from projections.views import keys as k


def index_entries(job: JobView | None) -> dict[bytes, bytes]:
    """Every index key (with its value) that ``job`` implies."""
    if job is None:
        return {}
    state = job.state
    if state is JobState.QUEUED:
        out = {ready_entry(job): job.job_id.encode()}
    elif state is JobState.RUNNING:
        out = {k.running_key(job.job_id): b"%d" % job.epoch} if job.scope is None else {}
    elif (state is JobState.SCHEDULED or state is JobState.RETRYING) and job.due_at is not None:
        out = {k.due_key(job.due_at, job.job_id): job.job_id.encode()}
    elif state is JobState.DEAD:
        out = {k.dead_key(job.finished_at or 0, job.job_id): job.job_id.encode()}
    else:
        out = {}
    if job.idempotency_key is not None:
        out[k.idempotency_key(job.tenant_id, job.idempotency_key)] = job.job_id.encode()
    return out


def ready_entry(job: JobView) -> bytes:
    """The ready-queue key of a queued job."""
    due = job.due_at if job.due_at is not None else (job.queued_at or 0)
    return k.ready_key(job.lane, job.tenant_id, job.priority, due, job.submitted_at, job.job_id)


_last: list[Any] = [None, {}]  # the newest record worked out and its entries: the next event's "before"


def index_changes(before: JobView | None, after: JobView | None) -> dict[bytes, bytes | None]:
    """Puts and deletes (None) that move the indexes from ``before`` to ``after``."""
    old: dict[bytes, bytes] = _last[1] if before is not None and _last[0] is before else index_entries(before)
    new = index_entries(after)
    _last[0], _last[1] = after, new
    changes: dict[bytes, bytes | None] = {key: None for key in old if key not in new}
    changes.update({key: v for key, v in new.items() if old.get(key) != v})
    return changes


def running_jobs(reader: Any) -> list[tuple[str, int]]:
    """(job id, epoch that started it) of every running job (scoped parents aside, as ``index_entries`` says)."""
    return [(key[len(k.RUNNING):].decode(), int(epoch)) for key, epoch in reader.scan(k.RUNNING)]


def dead_count(reader: Any) -> int:
    """Jobs in the dead-letter queue."""
    return sum(1 for _ in reader.scan(k.DEAD))
