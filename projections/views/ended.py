"""Ended jobs in the write model: a tombstone per job for the dedup window, and its expiry. Pure over a batch.

Keys (beside those of ``projections.views.keys``)::

    e:<job_id>                 -> (status, ended_at, tenant, idempotency key, result) as a marshal v2 tuple
    E:<expires_at>:<job_id>    -> b""   the expiry index (absent when the window is 0: for ever)

A job that completes or is cancelled leaves the write model: its record and index entries
are deleted and its tombstone stays, so a duplicate SubmitJob of its id is still answered
as a duplicate and a command on it is refused with its final state, and a job that waits for it
(``engine.domain.dependencies``) is told at once how it ended and gets its result: a completed job's
result stays in its tombstone for the window (stores written before the result was kept read
``None``). A dependency older than the window is unknown. Expiry is driven by
event time, in log order: when an event's time reaches ``m:sweep``, at most SWEEP_LIMIT
tombstones whose time has come are deleted (with a schedule occurrence's ``o:`` mark), and
the next sweep is set SWEEP_EVERY_US later (or at once, if more were due). A replay from
offset 0 makes the same sweeps at the same events, so it reaches the same bytes.
"""

from __future__ import annotations

import marshal
from typing import Any

from engine.contract.messages import Payload
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from projections.views.keys import num
from projections.views.schedules import occurrence_key

ENDED = b"e:"
EXPIRY = b"E:"
SWEEP = b"m:sweep"
SWEEP_EVERY_US = 10 * 1_000_000
"""Event time between two expiry sweeps."""
SWEEP_LIMIT = 512
"""Tombstones one sweep deletes at most (a later event sweeps again): the cost per event stays bounded."""
LEAVING = frozenset({JobState.COMPLETED, JobState.CANCELLED})
"""The final states that take a job out of the write model (a dead job stays: it can be replayed)."""
_NO_PAYLOAD = Payload(b"")


def ended_key(job_id: str) -> bytes:
    """The tombstone of an ended job."""
    return ENDED + job_id.encode()


def expiry_key(expires_at: int, job_id: str) -> bytes:
    """The expiry index entry of a tombstone."""
    return EXPIRY + num(expires_at) + b":" + job_id.encode()


def encode_ended(job: JobView, ended_at: int) -> bytes:
    """A tombstone's stored form."""
    return marshal.dumps((job.state.value, ended_at, job.tenant_id, job.idempotency_key, job.result), 2)


def end_job(batch: Any, job: JobView, ended_at: int, window_us: int) -> None:
    """``job`` ended at ``ended_at``: drop its record, keep its tombstone (and its expiry, if the window ends)."""
    batch.drop_job(job.job_id)
    batch.put(ended_key(job.job_id), encode_ended(job, ended_at))
    if window_us:
        batch.put(expiry_key(ended_at + window_us, job.job_id), b"")


def forget_ended(batch: Any, job_id: str, window_us: int) -> None:
    """A job id submitted again while its tombstone stays (a new life, or a forged record): the tombstone and
    its expiry entry go, so the expiry never deletes the new life's own tombstone."""
    raw = batch.get(ended_key(job_id))
    if raw is None:
        return
    batch.delete(ended_key(job_id))
    if window_us:
        batch.delete(expiry_key(marshal.loads(raw)[1] + window_us, job_id))


def read_ended(reader: Any, job_id: str) -> JobView | None:
    """An ended job as decisions see it (state, end, tenant, key, result; nothing else), or None."""
    raw = reader.get(ended_key(job_id))
    if raw is None:
        return None
    status, ended_at, tenant, key, *rest = marshal.loads(raw)
    return JobView(job_id, tenant, "", JobState(status), 0, "", 0, _NO_PAYLOAD, 0, ended_at, 0, key,
                   finished_at=ended_at, result=rest[0] if rest else None)


def sweep(batch: Any, now: int, window_us: int) -> int:
    """Delete the tombstones expired by event time ``now`` when a sweep is due; how many."""
    if not window_us:
        return 0
    due = batch.get(SWEEP)
    if due is not None and int(due) > now:
        return 0
    expired = batch.range(EXPIRY, EXPIRY + num(now + 1), SWEEP_LIMIT)
    for key in expired:
        job_id = key[len(EXPIRY) + 21:].decode()
        batch.delete(key)
        batch.delete(ended_key(job_id))
        batch.delete(occurrence_key(job_id))
    batch.put(SWEEP, b"%d" % (now if len(expired) >= SWEEP_LIMIT else now + SWEEP_EVERY_US))
    return len(expired)
