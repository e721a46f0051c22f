"""The catalog's indexes and counters: jobs by status, tenant, task type and label, newest first.

Each job has one entry in four indexes (by status; by tenant and status; by task type and
status; by tenant, task type and status; a running job in the first only, see RUNNING), keyed
so that a range of one (status, filter) is the jobs newest submission first: the key holds the
inverted submission time. The entries are a pure function of the job record's listing status,
tenant, task type and submission time, and only the status ever changes, so the fold touches
them only when the listing status changes (three times in a no-op job's life: submitted,
started, succeeded). Counters per status (and per tenant, task type, both) change only then
too. Both are worked out once per job per batch, at its commit (:func:`catalog_changes`). A
job's labels never change: their entries are written once, when the job is submitted.
``keys.py`` has the layout.
"""

from __future__ import annotations

import functools
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from projections.views import keys as k

STATUSES = ("waiting", "scheduled", "queued", "running", "retrying", "completed", "dead", "cancelled")
"""The statuses a listing knows; every job state maps to one of them (:func:`status_of`)."""
_SHOWN_AS = {JobState.PENDING: "queued", JobState.FAILED: "retrying", JobState.PARTIAL: "completed"}
"""States shown as another: pending (submitted, not yet placed) lasts one decision; failed is followed
at once by a retry or a dead letter; partial is a scoped job that settled (its children's errors
are in its record)."""
STATUS_OF: dict[JobState, str] = {state: _SHOWN_AS.get(state, state.value) for state in JobState}
INVERTED = 10**16 - 1
"""Submission times (µs) are stored as INVERTED - submitted_at in 16 digits (until the year 2286), so key
order is newest first; a machine integer, unlike 20 digits, so the fold's arithmetic stays cheap."""
SEP = b"\x1f"
RUNNING = b"running"
"""Running jobs are in the status index only: they are few (bounded by the handler slots), so a
filtered list of them reads the status range and checks each record; every job passes through
running, and two keys written and deleted per job instead of eight is most of the fold's cost
of the catalog."""


def status_of(state: JobState) -> str:
    """The listing status of a job state."""
    return STATUS_OF[state]


def inverted(submitted_at: int) -> bytes:
    """The newest-first sort part of a key: INVERTED - submitted_at, zero-padded."""
    return b"%016d" % (INVERTED - submitted_at)


def listing_keys(job: JobView, status: str | None = None) -> tuple[bytes, ...]:
    """The catalog index keys ``job`` implies (``status``: as if it had that listing status)."""
    return _keys(_prefixes(job.tenant_id, job.task_type), (status or STATUS_OF[job.state]).encode(),
                 SEP + inverted(job.submitted_at) + SEP + job.job_id.encode())


def _keys(prefixes: tuple[bytes, bytes, bytes, bytes], status: bytes, rest: bytes) -> tuple[bytes, ...]:
    tail = status + rest
    if status == RUNNING:
        return (prefixes[0] + tail,)
    return prefixes[0] + tail, prefixes[1] + tail, prefixes[2] + tail, prefixes[3] + tail


@functools.lru_cache(maxsize=65536)
def _prefixes(tenant: str, task_type: str) -> tuple[bytes, bytes, bytes, bytes]:
    t, y = tenant.encode(), task_type.encode()
    return k.LIST_STATUS, k.LIST_TENANT + t + SEP, k.LIST_TYPE + y + SEP, k.LIST_TENANT_TYPE + t + SEP + y + SEP


def catalog_changes(jobs: dict[str, JobView], committed: dict[str, JobView | None],
                    changes: dict[bytes, bytes | None], counts: dict[bytes, int]) -> None:
    """At a batch's commit: move the catalog entries and counters of each job whose listing status differs
    from its committed record's (``committed``: the record before the batch's first change, None for a
    new job). Once per job per batch, whatever the statuses it passed through within the batch (a job
    queued, started and finished in one tick costs one move, and writes no tombstone)."""
    for job_id, job in jobs.items():
        before = committed.get(job_id)
        old = STATUS_OF[before.state] if before is not None else None
        new = STATUS_OF[job.state]
        if old == new and before.submitted_at == job.submitted_at:  # type: ignore[union-attr]
            continue
        prefixes = _prefixes(job.tenant_id, job.task_type)
        rest = SEP + inverted(job.submitted_at) + SEP + job_id.encode()
        if before is not None and old is not None:  # the committed record: another life's, if the id came again
            gone = SEP + inverted(before.submitted_at) + SEP + job_id.encode()
            for key in _keys(_prefixes(before.tenant_id, before.task_type), old.encode(), gone):
                changes[key] = None
            key = counter_key(before.tenant_id, before.task_type, old)
            counts[key] = counts.get(key, 0) - 1
        for key in _keys(prefixes, new.encode(), rest):
            changes[key] = b""
        key = counter_key(job.tenant_id, job.task_type, new)
        counts[key] = counts.get(key, 0) + 1


@functools.lru_cache(maxsize=65536)
def counter_key(tenant: str, task_type: str, status: str) -> bytes:
    """The (tenant, task type, status) counter."""
    return k.COUNT_TENANT_TYPE + tenant.encode() + SEP + task_type.encode() + SEP + status.encode()


def rolled_up(counts: dict[bytes, int]) -> dict[bytes, int]:
    """Pending counter deltas with the (tenant, task type, status) ones added to the per-status,
    per-(tenant, status) and per-(task type, status) counters too."""
    out = dict(counts)
    for key, delta in counts.items():
        if delta and key.startswith(k.COUNT_TENANT_TYPE):
            for derived in _derived(key):
                out[derived] = out.get(derived, 0) + delta
    return out


@functools.lru_cache(maxsize=65536)
def _derived(key: bytes) -> tuple[bytes, bytes, bytes]:
    tenant, task_type, status = key[len(k.COUNT_TENANT_TYPE):].split(SEP)
    return k.COUNT_STATUS + status, k.COUNT_TENANT + tenant + SEP + status, k.COUNT_TYPE + task_type + SEP + status


def label_entries(job: JobView, labels: dict[str, str]) -> list[bytes]:
    """The label index keys of a job submitted with ``labels``."""
    tail = SEP + inverted(job.submitted_at) + SEP + job.job_id.encode()
    return [k.LIST_LABEL + name.encode() + SEP + value.encode() + tail for name, value in sorted(labels.items())]


def label_key(name: str, value: str, submitted_at: int, job_id: str) -> bytes:
    """The label index key of one (name, value) of a job."""
    return k.LIST_LABEL + name.encode() + SEP + value.encode() + SEP + inverted(submitted_at) + SEP + job_id.encode()
