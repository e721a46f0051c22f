"""The schedules view: each schedule's record, its due timer, and which jobs are a schedule's occurrences.

Keys (beside those of ``projections.views.keys``)::

    S:<schedule_id>              -> the schedule record (marshal v2 tuple)
    D:<armed_at>:<schedule_id>   -> schedule_id   (schedule timers: kept apart from the jobs' d:)
    o:<job_id>                   -> (schedule_id, occurrence)  an occurrence job, in the job's partition

``D:`` holds an entry exactly while the schedule is enabled and armed, so it is a pure
function of the record, kept right like the job indexes (delete what the old record
implied, add what the new one implies). ``o:`` is written when a ``JobSubmitted`` labelled
with a schedule is folded, so the job's owner knows whom to report to when the run ends.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterator
from typing import Any

from engine.contract import messages as m
from engine.domain.schedules import SCHEDULE_EVENTS, ScheduleView, evolve_schedule, occurrence_of
from engine.errors import ProjectionCorruptedError
from projections.views.keys import num

SCHEDULE = b"S:"
SCHEDULE_DUE = b"D:"
OCCURRENCE = b"o:"
FORMAT = 1
_FIELDS = ScheduleView.__slots__
_PAYLOAD = _FIELDS.index("payload")


def schedule_key(schedule_id: str) -> bytes:
    """The key of a schedule record."""
    return SCHEDULE + schedule_id.encode()


def schedule_due_key(armed_at: int, schedule_id: str) -> bytes:
    """A schedule timer: the armed occurrence of an enabled schedule."""
    return SCHEDULE_DUE + num(armed_at) + b":" + schedule_id.encode()


def occurrence_key(job_id: str) -> bytes:
    """The key that marks a job as a schedule's occurrence."""
    return OCCURRENCE + job_id.encode()


def fold_schedule(batch: Any, event: m.Event) -> bool:
    """Apply a schedule event (True); note an occurrence job's submission and return False so the job fold runs."""
    body = event.body
    if isinstance(body, m.JobSubmitted):
        _note_occurrence(batch, event.job_id, body)
        return False
    if not isinstance(body, SCHEDULE_EVENTS):
        return False
    before = read_schedule(batch, body.schedule_id)
    after = evolve_schedule(before, event)
    for key in _timer(before) - _timer(after):
        batch.delete(key)
    for key in _timer(after) - _timer(before):
        batch.put(key, body.schedule_id.encode())
    if after is None:
        batch.delete(schedule_key(body.schedule_id))
    else:
        batch.put(schedule_key(body.schedule_id), encode_schedule(after))
    return True


def _note_occurrence(batch: Any, job_id: str | None, body: m.JobSubmitted) -> None:
    found = occurrence_of(body.labels or {})
    if job_id and found is not None:
        batch.put(occurrence_key(job_id), marshal.dumps(found, 2))


def _timer(view: ScheduleView | None) -> set[bytes]:
    if view is None or not view.enabled or view.armed is None:
        return set()
    return {schedule_due_key(view.armed, view.schedule_id)}


def encode_schedule(view: ScheduleView) -> bytes:
    """The stored form of a schedule record (equal records, equal bytes)."""
    values: list[Any] = [getattr(view, f) for f in _FIELDS]
    p = view.payload
    values[_PAYLOAD] = (p.data, p.content_type, p.schema_name, p.schema_version)
    return marshal.dumps((FORMAT, *values), 2)


def decode_schedule(raw: bytes) -> ScheduleView:
    """A schedule record from its stored form."""
    values = list(marshal.loads(raw))
    if values[0] != FORMAT:
        raise ProjectionCorruptedError(
            f"schedule record format {values[0]!r}, expected {FORMAT}: rebuild the projection")
    del values[0]
    values[_PAYLOAD] = m.Payload(*values[_PAYLOAD])
    return ScheduleView(*values)


def read_schedule(reader: Any, schedule_id: str) -> ScheduleView | None:
    """The schedule's record through a store or a batch (None: no such schedule)."""
    raw = reader.get(schedule_key(schedule_id))
    return None if raw is None else decode_schedule(raw)


def all_schedules(reader: Any) -> Iterator[ScheduleView]:
    """Every schedule of a partition, by id."""
    for _, raw in reader.scan(SCHEDULE):
        yield decode_schedule(raw)


def read_occurrence(reader: Any, job_id: str) -> tuple[str, int] | None:
    """(schedule id, occurrence) if ``job_id`` was submitted for a schedule."""
    raw = reader.get(occurrence_key(job_id))
    return None if raw is None else tuple(marshal.loads(raw))
