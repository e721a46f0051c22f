"""Rejected submits in a view: the source of truth for ``jobs list --status rejected``.

A ``SubmitJob`` the owner rejects (``JobRejected``: an unknown task type, a queue over its limit, a
signature that proves nothing…) makes no job record, so the catalog never lists it. A view (the
``FULL`` profile, never the owner's write model) keeps one entry per rejection, oldest first, with
what a listing shows; retention lets it go ``keep`` after it was rejected, as a finished job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from engine.contract import messages as m
from projections.batch import Batch
from projections.views import keys as k

REJECTED = b"V:r:"  # V:r:<rejected_at>:<job_id> -> {"tenant", "task_type", "reason", "detail"} as JSON
STAMP = len(REJECTED) + 21
"""Where the job id starts in a key (after the 20 digits of the time and a colon)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """One rejected submit as a view keeps it."""

    job_id: str
    tenant: str
    task_type: str
    reason: str
    detail: str
    rejected_at: int


def rejected_key(rejected_at: int, job_id: str) -> bytes:
    """The entry of a submit rejected at ``rejected_at``."""
    return REJECTED + k.num(rejected_at) + b":" + job_id.encode()


def fold_rejected(batch: Batch, event: m.Event) -> bytes | None:
    """Keep a ``JobRejected`` (in a view's store only); the key written, or None when there is nothing to keep."""
    body = event.body
    if batch.slim or not isinstance(body, m.JobRejected) or not event.job_id:
        return None
    key = rejected_key(event.occurred_at, event.job_id)
    batch.put(key, json.dumps({"tenant": event.tenant_id or "", "task_type": body.task_type, "reason": body.reason,
                               "detail": body.detail}, sort_keys=True).encode())
    return key


def rejections(entries: Iterator[tuple[bytes, bytes]]) -> Iterator[Rejection]:
    """The rejections a scan of REJECTED returns, oldest first."""
    for key, raw in entries:
        value = json.loads(raw)
        yield Rejection(key[STAMP:].decode(), value["tenant"], value["task_type"], value["reason"], value["detail"],
                        int(key[len(REJECTED):STAMP - 1]))


def expired(batch: Batch, cutoff_us: int, staged: list[bytes], limit: int) -> list[bytes]:
    """The first ``limit`` entries (committed, and ``staged`` since the last commit) rejected before ``cutoff_us``."""
    bound = rejected_key(cutoff_us, "")
    changes = batch.changes
    found = {key for key in staged if key < bound and changes.get(key) is not None}
    committed = 0
    for key in batch.store.keys(REJECTED):
        if key >= bound or committed >= limit:
            break
        if changes.get(key, b"") is not None:
            found.add(key)
            committed += 1
    return sorted(found)[:limit]
