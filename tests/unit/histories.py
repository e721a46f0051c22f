"""Event streams the unit tests of the fold, the write model, the catalog and retention share."""

from __future__ import annotations

from collections import Counter

from hypothesis import strategies as st

from engine.contract import messages as m
from engine.domain.decide import AttemptFinished, CommandInput, DecideContext, StartAttempt, TimerFired, decide
from engine.domain.jobs import evolve
from projections.views import keys as k
from projections.views.jobs import decode_job
from projections.views.listing import STATUS_OF, counter_key, listing_keys, rolled_up
from tests.unit.factories import claim, event, submit

def simulate(steps: list[tuple[int, int]], epoch: int = 1) -> list[m.Event]:
    """A valid event stream for a few jobs, driven by (job number, action) pairs."""
    events, jobs = [claim(epoch)], {}
    for n, (job_no, action) in enumerate(steps):
        jid = f"job-{job_no}"
        ctx = DecideContext(now=1_000 + n, epoch=epoch)
        given = _input(jid, action, jobs.get(jid), n)
        for emit in decide(jobs.get(jid), given, ctx):
            ev = event(emit.body, jid, epoch=epoch, at=ctx.now)
            jobs[jid] = evolve(jobs.get(jid), ev)
            events.append(ev)
    return events


def _input(jid: str, action: int, job, n: int):  # type: ignore[no-untyped-def]
    if job is None or action == 0:
        return CommandInput(submit(jid, run_at=1_000 + n + (action % 3)), n)
    if action == 1:
        return TimerFired(jid)
    if action == 2:
        return StartAttempt(jid)
    kind = "succeeded" if action == 3 else "failed"
    return AttemptFinished(jid, job.attempt, kind, 10, error_type="E", message="boom")


STEPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=60)


KEY = "order-7"


def life(job_id: str = "job-1", at: int = 1_000, key: str | None = KEY) -> list[m.Event]:
    """A job's events from submission to success."""
    submitted = m.JobSubmitted("email.send", m.Payload(b"{}"), 5, "normal", 3, idempotency_key=key)
    return [event(submitted, job_id, at=at), event(m.JobQueued("submitted"), job_id, at=at),
            event(m.JobStarted(1, "w", 1), job_id, at=at + 1), event(m.JobSucceeded(1, 5, None), job_id, at=at + 2)]


def expected_catalog(items: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """The catalog keys and counters the job records in ``items`` imply."""
    jobs = [decode_job(v) for key, v in items.items() if key.startswith(k.JOB)]
    out = {key: b"" for job in jobs for key in listing_keys(job)}
    tallies = Counter(counter_key(j.tenant_id, j.task_type, STATUS_OF[j.state]) for j in jobs)
    out.update({key: b"%d" % n for key, n in rolled_up(dict(tallies)).items()})
    return out


def lifecycle(job_id: str, tenant: str, task_type: str, at: int, *, end: str = "completed",
              labels: dict[str, str] | None = None) -> list[m.Event]:
    """The events of a job that ends in ``end`` (queued, running, completed, dead, cancelled, scheduled)."""
    def ev(body: m.EventBody, dt: int = 0) -> m.Event:
        return event(body, job_id, tenant=tenant, at=at + dt)

    run_at = at + 1_000_000 if end == "scheduled" else None
    out = [ev(m.JobSubmitted(task_type, m.Payload(b"{}"), 5, "normal", 1, run_at, labels=labels or {}))]
    if end == "scheduled":
        return out + [ev(m.JobScheduled(run_at))]  # type: ignore[arg-type]
    out.append(ev(m.JobQueued("submitted"), 1))
    if end == "cancelled":
        return out + [ev(m.JobCancelled("no"), 2)]
    if end == "queued":
        return out
    out.append(ev(m.JobStarted(1, at), 2))
    if end == "running":
        return out
    if end == "dead":
        return out + [ev(m.JobFailed(1, "E", "boom", 5), 3), ev(m.JobDeadLettered("attempts", 1), 4)]
    return out + [ev(m.JobSucceeded(1, 5), 3)]
