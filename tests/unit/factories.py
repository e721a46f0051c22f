"""Builders of commands and events for pure tests."""

from __future__ import annotations

import itertools

from engine.contract import messages as m

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
