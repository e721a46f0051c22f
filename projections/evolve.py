"""The fold: one event read back from the log becomes changes to the partition's views.

Fencing rule: an event counts only if its epoch equals the epoch of the newest
``OwnershipClaimed`` before it in the log. Anything else was written by a zombie (or
by nobody who owned the partition) and is recorded in history as fenced, changing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.contract import messages as m
from engine.domain.jobs import JobView, evolve
from engine.errors import InvalidTransitionError
from projections.batch import Batch
from projections.views import keys as k
from projections.views.breakers import fold_breaker
from projections.views.counters import charge_start, track_depths
from projections.views.indexes import index_changes
from projections.views.jobs import read_job, write_job
from projections.views.schedules import fold_schedule

APPLIED, FENCED, IGNORED = "applied", "fenced", "ignored"


@dataclass(frozen=True, slots=True)
class Folded:
    """What folding one event did: its verdict and the job before and after."""

    status: str
    before: JobView | None = None
    after: JobView | None = None


def current_epoch(reader: Batch) -> int:
    """The epoch of the newest ownership claim folded so far (0 before any)."""
    raw = reader.get(k.EPOCH)
    return int(raw) if raw is not None else 0


Known = tuple[JobView | None, JobView | None]
"""A job before and after an event, as its writer computed them when it decided (see _job_event)."""


def fold(batch: Batch, event: m.Event, offset: int, known: Known | None = None) -> Folded:
    """Apply ``event`` (at ``offset`` in the events partition) to ``batch``."""
    batch.last_offset = offset
    if isinstance(event.body, m.OwnershipClaimed):
        return _claim(batch, event, offset)
    if event.epoch != current_epoch(batch):
        result = Folded(FENCED)
    elif isinstance(event.body, m.CommandQuarantined):
        batch.put(k.QUARANTINE + k.num(offset), event.body.error.encode())
        result = Folded(APPLIED)
    elif fold_breaker(batch, event):
        result = Folded(APPLIED)
    elif fold_schedule(batch, event):
        result = Folded(APPLIED)
    else:
        result = _job_event(batch, event, known)
    if event.job_id:
        batch.put(k.history_key(event.job_id, offset), result.status.encode())
    return result


def _claim(batch: Batch, event: m.Event, offset: int) -> Folded:
    if event.epoch <= current_epoch(batch):
        return Folded(FENCED)
    batch.put(k.EPOCH, b"%d" % event.epoch)
    batch.put(k.OWNER, event.owner.encode())
    batch.put(k.CLAIMS + k.num(event.epoch), event.owner.encode() + b"\x00%d" % offset)
    return Folded(APPLIED)


def _job_event(batch: Batch, event: m.Event, known: Known | None) -> Folded:
    if not event.job_id:
        return Folded(IGNORED)
    before = read_job(batch, event.job_id)
    if known is not None and known[0] is before:  # the very record the writer evolved: same result
        after = known[1]
    else:
        try:
            after = evolve(before, event)
        except InvalidTransitionError:
            return Folded(IGNORED, before, before)
    if after is not before:
        for key, value in index_changes(before, after).items():
            batch.changes[key] = value
        write_job(batch, after)  # type: ignore[arg-type]
        track_depths(batch, before, after)
        if isinstance(event.body, m.JobStarted):
            charge_start(batch, after, event.body)  # type: ignore[arg-type]
    return Folded(APPLIED, before, after)
