"""Who may do what: the source of truth for the powers a command's signer has. Pure.

The signature says who signed a command (``engine.contract.signing.authenticate``); this rule
says whether that signer may ask for it (docs/security.md, *Who may do what*):

- the engines' key and an operator key may do anything, for any tenant;
- a tenant's key acts for that tenant only: not on a task type as a whole (pause, resume, rate
  limits hold every tenant's jobs), not with a scope that runs jobs as other tenants (``global``,
  ``product:…``), not as a scoped job's child (``parent_job_id``, set by engines), and on
  schedules of its own only (one that runs as itself, and no schedule id another tenant holds);
- an unsigned command reaches this rule only when signatures are not required (dev mode): as
  before, it may do what it asks.
"""

from __future__ import annotations

from engine.contract import messages as m
from engine.contract.signing import Signer

OPERATOR_COMMANDS = (m.PauseTaskType, m.ResumeTaskType, m.SetRateLimit, m.ClearRateLimit)
"""Commands on a task type as a whole: they hold or throttle every tenant's jobs of the type."""
SCHEDULE_COMMANDS = (m.UpsertSchedule, m.PauseSchedule, m.ResumeSchedule, m.RemoveSchedule)
OPERATOR_KEY = "sign it with an operator key: EPOCHQ_OPERATOR_KEY_FILE"


def refusal(command: m.Command, signer: Signer, schedule_owner: str | None = None) -> str | None:
    """Why the signer of ``command`` may not ask for it; None if it may.

    ``schedule_owner``: for a schedule command, the tenant of the schedule it names as the
    partition knows it (None for a schedule that does not exist)."""
    if signer is not Signer.TENANT:
        return None
    body, tenant = command.body, command.tenant_id
    if isinstance(body, OPERATOR_COMMANDS):
        return (f"{type(body).__name__} acts on every tenant's jobs of task type {body.task_type!r}: an operator's "
                f"command, not a tenant's ({OPERATOR_KEY})")
    if isinstance(body, m.SubmitJob):
        return _submit(body, tenant)
    if isinstance(body, SCHEDULE_COMMANDS):
        return _schedule(body, tenant, schedule_owner)
    return None


def _submit(body: m.SubmitJob, tenant: str) -> str | None:
    if body.scope not in (None, "tenant"):
        return (f"scope {body.scope!r} runs jobs as other tenants: an operator's command, not a tenant's "
                f"({OPERATOR_KEY})")
    if body.parent_job_id is not None:
        return "parent_job_id: only engines submit a scoped job's children"
    return None


def _schedule(body: m.UpsertSchedule | m.PauseSchedule | m.ResumeSchedule | m.RemoveSchedule, tenant: str,
              owner: str | None) -> str | None:
    if owner is not None and owner != tenant:
        return f"schedule {body.schedule_id!r} belongs to tenant {owner!r}, not to tenant {tenant!r}"
    if isinstance(body, m.UpsertSchedule) and body.tenant_id != tenant:
        return (f"schedule {body.schedule_id!r} would run jobs as tenant {body.tenant_id!r}: tenant {tenant!r} "
                "schedules its own jobs only")
    return None
