"""The schedules of one owned partition in the engine: decisions with their overlay, reports, and pings.

Two partitions take part in every occurrence:

- the *schedule's* partition (``schedule:<id>``) decides ``ScheduleFired`` and sends the
  occurrence's ``SubmitJob``; later it receives ``ReportOccurrence`` and arms the next one;
- the *job's* partition runs the job; when the job reaches a final state, its owner (this
  module's :meth:`ScheduleDesk.report`) sends ``ReportOccurrence`` to the schedule's
  partition, knowing from the ``o:<job_id>`` view that the job is an occurrence.

A report is sent in the same transaction as the final event, and a schedule's owner also
*pings*: while a fired occurrence has not reported, it
submits the occurrence's job again after 5 s, 10 s, 20 s … (at most every 10 min). The job
id is derived, so the copy never runs: the job's owner answers with a ``CommandRefused``
and, if the job has already ended, repeats its report. The same ping resubmits an
occurrence whose ``SubmitJob`` was rejected (a full queue), so it runs once admitted.
Repeated reports are harmless: the schedule ignores a report for an occurrence it is not
waiting for.
"""

from __future__ import annotations

import logging

from engine.contract import messages as m
from engine.domain import fence
from engine.domain.decide import DecideContext, Input
from engine.domain.lifecycle import FINAL_STATES
from engine.domain.schedules import (
    SCHEDULE_EVENTS, ScheduleContext, ScheduleDue, ScheduleView, decide_schedule, occurrence_submit, report_command,
)
from engine.domain.timerouter import HotSet
from engine.runtime.loop.draft import Draft
from projections.evolve import APPLIED, Folded
from projections.views.schedules import all_schedules, read_occurrence, read_schedule

log = logging.getLogger("epochq.schedules")

SECOND = 1_000_000
FIRST_PING_US = 5 * SECOND
MAX_PING_US = 600 * SECOND


class ScheduleDesk:
    """One partition's schedule timers, reports and pings; the schedules themselves live in its batch and store."""

    def __init__(self, draft: Draft, hot: HotSet):
        self.draft = draft  # the partition's draft: what the desk decides and sends is staged there
        self.hot = hot  # the schedule timers held in memory (``D:`` entries within the horizon)
        self.pings: dict[str, tuple[int, int, int]] = {}  # schedule id -> (next ping at, delay, pings sent)

    def load(self, now: int) -> None:
        """Owe a ping to every schedule the store shows with a run in flight (a new owner knows no more)."""
        for view in all_schedules(self.draft.store):
            if view.fired is not None:
                self.pings[view.schedule_id] = (now + FIRST_PING_US, FIRST_PING_US, 0)

    def view(self, schedule_id: str) -> ScheduleView | None:
        """The schedule as this partition's decisions leave it (pending batch over store)."""
        return read_schedule(self.draft.batch, schedule_id)

    # --- deciding ------------------------------------------------------------------------

    def decide(self, schedule_id: str, given: Input | ScheduleDue, ctx: DecideContext, cause: str | None = None,
               correlation: str | None = None) -> list[m.Event]:
        """Decide for one schedule; stage its events and the commands it sends."""
        sctx = ScheduleContext(ctx.now, ctx.tasks, ctx.max_payload_bytes)
        outs = decide_schedule(self.view(schedule_id), given, sctx)  # type: ignore[arg-type]
        return self.draft.take(outs, ctx.now, cause, correlation)

    # --- following the fold ----------------------------------------------------------------

    def observe(self, event: m.Event, folded: Folded) -> None:
        """A folded event: keep timers and pings in step, report ended occurrences."""
        if folded.status != APPLIED:
            return
        body = event.body
        if isinstance(body, SCHEDULE_EVENTS):
            self._follow(body, event.occurred_at)
        elif folded.after is not None and fence.counts(event.epoch, self.draft.epoch):
            self.report(event, folded)

    def _follow(self, body: m.EventBody, at: int) -> None:
        sid: str = body.schedule_id  # type: ignore[union-attr]
        if isinstance(body, m.ScheduleArmed):
            self.pings.pop(sid, None)
            self.hot.add(body.occurrence_at, sid)
        elif isinstance(body, m.ScheduleFired):
            self.pings[sid] = (at + FIRST_PING_US, FIRST_PING_US, 0)
            self.hot.remove(sid)
        elif isinstance(body, m.OccurrenceSkipped):
            if self.hot.due_of(sid) == body.occurrence_at:
                self.hot.remove(sid)
        elif not isinstance(body, m.ScheduleResumed):  # upserted, paused, removed: nothing stays armed
            self.hot.remove(sid)
            if isinstance(body, m.ScheduleRemoved):
                self.pings.pop(sid, None)

    def report(self, event: m.Event, folded: Folded) -> None:
        """If a schedule's occurrence job just ended (or was pinged after it ended), tell the schedule."""
        job = folded.after
        assert job is not None
        if job.state not in FINAL_STATES:
            return
        ended = folded.before is None or folded.before.state not in FINAL_STATES
        pinged = isinstance(event.body, m.CommandRefused) and event.body.command == "SubmitJob"
        if not (ended or pinged):
            return
        found = read_occurrence(self.draft.batch, job.job_id)
        if found is not None:
            sid, occurrence = found
            self.draft.send(report_command(sid, occurrence, job.job_id, job.tenant_id, job.state.value,
                                           event.occurred_at))

    # --- pings ---------------------------------------------------------------------------

    def ping(self, now: int) -> int:
        """Submit again the occurrence jobs that have not reported in time; how many were sent."""
        sent = 0
        for sid, (at, delay, count) in list(self.pings.items()):
            if at > now:
                continue
            view = self.view(sid)
            if view is None or view.fired is None:
                del self.pings[sid]
                continue
            self.draft.send(occurrence_submit(view, view.fired, now, count + 1))
            log.info("schedule %s: occurrence job %s has not reported after %.0f s; pinging it (%d)",
                     sid, view.fired_job_id, (now - (view.fired_at or now)) / SECOND, count + 1)
            self.pings[sid] = (now + min(2 * delay, MAX_PING_US), min(2 * delay, MAX_PING_US), count + 1)
            sent += 1
        return sent

    def next_ping(self) -> int | None:
        """When the next ping is due (µs), or None."""
        return min((at for at, _, _ in self.pings.values()), default=None)
