"""Decisions written but not yet read back: the owner's short-term memory. The log wins."""

from __future__ import annotations

from collections.abc import Callable

from engine.contract import messages as m
from engine.domain.jobs import JobView, evolve


class Overlay:
    """Jobs as they will be once this owner's pending events are folded from the log."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobView | None] = {}
        self.pending: dict[str, str] = {}  # event_id -> job_id
        self.transitions: dict[str, tuple[JobView | None, JobView | None]] = {}  # event_id -> (before, after)
        self.per_job: dict[str, int] = {}

    def job(self, job_id: str, from_store: Callable[[str], JobView | None]) -> JobView | None:
        """The job with this owner's pending events applied on top of the store's view."""
        if job_id in self.jobs:
            return self.jobs[job_id]
        return from_store(job_id)

    def add(self, event: m.Event, before: JobView | None) -> JobView | None:
        """Record an event about to be written; returns the job after it."""
        after = evolve(before, event)
        if event.job_id:
            self.jobs[event.job_id] = after
            self.pending[event.event_id] = event.job_id
            self.transitions[event.event_id] = (before, after)
            self.per_job[event.job_id] = self.per_job.get(event.job_id, 0) + 1
        return after

    def read_back(self, event_id: str) -> None:
        """One of our events was folded from the log; forget it once its job has none pending."""
        job_id = self.pending.pop(event_id, None)
        if job_id is None:
            return
        self.transitions.pop(event_id, None)
        left = self.per_job[job_id] - 1
        if left:
            self.per_job[job_id] = left
        else:
            del self.per_job[job_id]
            self.jobs.pop(job_id, None)

    def clear(self) -> None:
        """Forget everything (after an aborted transaction or a lost partition)."""
        self.jobs.clear()
        self.pending.clear()
        self.transitions.clear()
        self.per_job.clear()

    def __len__(self) -> int:
        return len(self.pending)
