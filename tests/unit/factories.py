"""Builders of commands and events for pure tests."""

from __future__ import annotations

import itertools

from engine.contract import messages as m
from engine.domain.decide import DecideContext, TaskPolicy, decide
from engine.domain.jobs import JobView, evolve
from engine.domain.retry import RetryPolicy

_ids = itertools.count(1)


def submit(job_id: str = "job-1", tenant: str = "acme", task_type: str = "email.send", *,
           priority: int = 5, run_at: int | None = None, key: str | None = None,
           data: bytes = b"{}", max_attempts: int | None = None, lane: str | None = None) -> m.Command:
    body = m.SubmitJob(task_type, m.Payload(data), priority, run_at, key, lane, max_attempts)
    return m.Command(f"cmd-{next(_ids)}", job_id, tenant, 0, body)


def command(job_id: str, body: m.CommandBody, tenant: str = "acme") -> m.Command:
    return m.Command(f"cmd-{next(_ids)}", job_id, tenant, 0, body)


def event(body: m.EventBody, job_id: str | None = "job-1", *, epoch: int = 1, at: int = 1_000,
          tenant: str | None = "acme", owner: str = "owner-a") -> m.Event:
    return m.Event(f"ev-{next(_ids)}", job_id, tenant, epoch, owner, at, body)


def claim(epoch: int, owner: str = "owner-a", partition: int = 0) -> m.Event:
    return event(m.OwnershipClaimed(partition, owner), None, epoch=epoch, tenant=None, owner=owner)


DECIDE_NOW = 10_000_000
DECIDE_CTX = DecideContext(now=DECIDE_NOW, epoch=1, tasks={"email.send": TaskPolicy(RetryPolicy(3, 1.0, 10.0, 0.0))})
"""The context the decide tests share: an epoch-1 owner at ``DECIDE_NOW`` with one task type, three attempts."""


def decided(job: JobView | None, given: object,
            ctx: DecideContext = DECIDE_CTX) -> tuple[JobView | None, list[m.EventBody]]:
    """``decide`` on ``given``, then each event it makes folded into ``job``: the job after, and the events' bodies."""
    bodies = [e.body for e in decide(job, given, ctx)]  # type: ignore[arg-type]
    for body in bodies:
        job = evolve(job, event(body, "job-1", epoch=ctx.epoch, at=ctx.now))
    return job, bodies
