"""The fold: one event becomes changes to the partition's views.

Two halves. :func:`fold_state` changes the state (jobs, indexes, counters, breakers,
schedules, the newest claim) and needs no log position, so the owner folds its own events
when it decides them. :func:`record_position` writes what names the event's offset (its
history entry, a quarantine entry, a claim's offset, the applied offset) once the offset
is known. :func:`fold` is both in order: what a restore and a rebuild do with every record.

A profile (``projections.profile``, carried by the batch) says what the fold keeps: ``FULL``
(the default: everything, what a view answers questions from) or ``WRITE_MODEL`` (what the
owner decides with: no history index, tenant index, catalog, labels or counters, and a job
that completes or is cancelled leaves it for a tombstone, ``projections.views.ended``).

Fencing (``engine.domain.fence``): an event counts only if its epoch equals the epoch of
the newest valid ``OwnershipClaimed`` before it in the log. Anything else was written by a
zombie (or by nobody who owned the partition) and is recorded in history as fenced,
changing nothing.
"""

from __future__ import annotations

from typing import NamedTuple

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.jobs import NEW_LIFE_AFTER, JobView, evolve
from engine.errors import InvalidTransitionError, ProjectionCorruptedError
from projections.batch import Batch
from projections.views import keys as k
from projections.views.aside import count_aside
from projections.views.breakers import fold_breaker
from projections.profile import FULL, WRITE_MODEL, Profile, write_model
from projections.views.counters import charge_start, track_depths
from projections.views.dependencies import drop_reports, fold_report
from projections.views.ended import LEAVING, end_job, forget_ended, read_ended, sweep
from projections.views.indexes import index_changes
from projections.views.jobs import read_job, write_job
from projections.views.listing import label_entries
from projections.views.pauses import fold_pause
from projections.views.ratelimits import charge_rate, fold_limit
from projections.views.rejected import fold_rejected
from projections.views.schedules import fold_schedule

APPLIED, FENCED, IGNORED = "applied", "fenced", "ignored"
TENANT_INDEXED = frozenset({m.JobSubmitted, m.JobRejected, m.CommandRefused, m.DuplicateSubmitted})
"""The events that name a job's tenant in the tenant index: the audit's rule for whose a job is (any verdict)."""
__all__ = ["FULL", "WRITE_MODEL", "Profile", "write_model", "fold", "fold_guarded", "fold_state", "record_position"]
POISON = "poison"
"""The verdict on an event whose fold raised: its changes were undone, only its position is recorded."""


class Folded(NamedTuple):
    """What folding one event did: its verdict and the job before and after (a named tuple: one per event)."""

    status: str
    before: JobView | None = None
    after: JobView | None = None


FENCED_FOLD = Folded(FENCED)
APPLIED_FOLD = Folded(APPLIED)


def current_epoch(reader: Batch) -> int:
    """The epoch of the newest ownership claim folded so far (0 before any)."""
    raw = reader.get(k.EPOCH)
    return int(raw) if raw is not None else 0


def fold(batch: Batch, event: m.Event, offset: int) -> Folded:
    """Apply ``event`` (at ``offset`` in the events partition) to ``batch``, state and position."""
    folded = fold_state(batch, event)
    record_position(batch, event, folded.status, offset)
    return folded


def fold_guarded(batch: Batch, event: m.Event, offset: int) -> Folded:
    """:func:`fold`, but an event whose fold raises is set aside: its changes undone, verdict ``poison``."""
    batch.savepoint()
    try:
        folded = fold_state(batch, event)
    except ProjectionCorruptedError:
        batch.rollback()
        raise  # the store is at fault, not the record: it must be wiped and restored
    except Exception:  # noqa: BLE001 - one bad record must not stop a restore; the verdict records it
        batch.rollback()
        folded = Folded(POISON)
    else:
        batch.release()
    record_position(batch, event, folded.status, offset)
    return folded


def fold_state(batch: Batch, event: m.Event) -> Folded:
    """Apply what ``event`` changes in the views (no log position needed)."""
    body = event.body
    if isinstance(body, m.OwnershipClaimed):
        return _claim(batch, event)
    if not fence.counts(event.epoch, current_epoch(batch)):
        return FENCED_FOLD
    if batch.slim:
        sweep(batch, event.occurred_at, batch.profile.dedup_window_us)
    if isinstance(body, m.CommandQuarantined):
        return APPLIED_FOLD
    if isinstance(body, m.JobRejected):
        fold_rejected(batch, event)  # no job record: a view keeps the rejection apart (projections.views.rejected)
    if fold_breaker(batch, event) or fold_schedule(batch, event) or fold_pause(batch, event) \
            or fold_limit(batch, event):
        return APPLIED_FOLD
    return _job_event(batch, event)


def record_position(batch: Batch, event: m.Event, status: str, offset: int) -> None:
    """Write what names the event's offset: history, quarantine, claim; and the applied offset."""
    batch.last_offset = offset
    body = event.body
    if status != APPLIED and not batch.slim:
        count_aside(batch, "fenced_claim" if status == FENCED and isinstance(body, m.OwnershipClaimed) else status)
    if status == APPLIED:
        if isinstance(body, m.OwnershipClaimed):
            batch.put(k.CLAIMS + k.num(event.epoch), event.owner.encode() + b"\x00%d" % offset)
        elif isinstance(body, m.CommandQuarantined):
            batch.put(k.QUARANTINE + k.num(offset), body.error.encode())
    if event.job_id and not batch.slim:
        batch.put(k.history_key(event.job_id, offset), status.encode())
        if type(body) in TENANT_INDEXED:
            batch.put(k.tenant_job_key(event.tenant_id or "", event.job_id), b"")


def _claim(batch: Batch, event: m.Event) -> Folded:
    if not fence.claim_counts(event.epoch, current_epoch(batch)):
        return FENCED_FOLD
    batch.put(k.EPOCH, b"%d" % event.epoch)
    batch.put(k.OWNER, event.owner.encode())
    return APPLIED_FOLD


def _job_event(batch: Batch, event: m.Event) -> Folded:
    if not event.job_id:
        return Folded(IGNORED)
    before = prior = read_job(batch, event.job_id)
    if before is None and batch.slim:
        before = _ended(batch, event)
    elif isinstance(event.body, m.JobSubmitted) and before is not None and before.state in NEW_LIFE_AFTER:
        before = None  # the id submitted again after the dedup window: a new life (as the write model sees it)
    try:
        after = evolve(before, event)
    except InvalidTransitionError:
        return Folded(IGNORED, before, before)
    if after is not before and after is not None and after.depends_on:
        _dependency_reports(batch, event, after)
    if after is not before and batch.slim:
        _write_model_change(batch, event, before, after)  # type: ignore[arg-type]
    elif after is not before:
        put = batch.put
        for key, value in index_changes(before, after).items():
            put(key, value)
        write_job(batch, after)  # type: ignore[arg-type]
        track_depths(batch, before, after)
        batch.listed.setdefault(event.job_id, prior)  # the committed record: the catalog moves at commit
        if before is None and isinstance(event.body, m.JobSubmitted) and event.body.labels:
            for key in label_entries(after, event.body.labels):  # type: ignore[arg-type]
                put(key, b"")
        if isinstance(event.body, m.JobStarted):
            charge_start(batch, after, event.body)  # type: ignore[arg-type]
            charge_rate(batch, after, event.occurred_at)  # type: ignore[arg-type]
    return Folded(APPLIED, before, after)


def _dependency_reports(batch: Batch, event: m.Event, job: JobView) -> None:
    """A waiting job's reports: one key each (projections.views.dependencies), gone when the job has ended."""
    if isinstance(event.body, m.DependencyReported):
        fold_report(batch, job.job_id, event.body)
    elif job.state in LEAVING:
        drop_reports(batch, job)


def _ended(batch: Batch, event: m.Event) -> JobView | None:
    """The tombstone of an ended job (the write model), or None; a JobSubmitted over one starts a new life."""
    if isinstance(event.body, m.JobSubmitted):
        forget_ended(batch, event.job_id, batch.profile.dedup_window_us)  # type: ignore[arg-type]
        return None
    return read_ended(batch, event.job_id)  # type: ignore[arg-type]


def _write_model_change(batch: Batch, event: m.Event, before: JobView | None, after: JobView) -> None:
    """The write model's half of :func:`_job_event`: indexes, depths and fair-share clocks; an end leaves."""
    ended = after.state in LEAVING
    for key, value in index_changes(before, None if ended else after).items():
        batch.put(key, value)
    track_depths(batch, before, after)
    if ended:
        end_job(batch, after, event.occurred_at, batch.profile.dedup_window_us)
    else:
        write_job(batch, after)
    if isinstance(event.body, m.JobStarted):
        charge_start(batch, after, event.body)
        charge_rate(batch, after, event.occurred_at)
