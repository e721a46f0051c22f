"""The test handlers, in an engine whose transaction carrying a job's first ``JobSucceeded`` is aborted on the
broker once per job (as a broker error at commit time does): the result decided in it must not be lost."""

from __future__ import annotations

from typing import Any

from engine.contract import messages as m
from engine.errors import TransactionAbortedError
from engine.runtime.loop import write
from tests.integration.apps import app

__all__ = ["app"]

_real_commit = write.Writer._commit
_aborted: set[str] = set()


def _commit(self: write.Writer, written: write.Written, group: Any) -> None:
    succeeded = {e.job_id for e in written.staged.events if isinstance(e.body, m.JobSucceeded)} - _aborted
    if succeeded:
        _aborted.update(j for j in succeeded if j)
        injected = TransactionAbortedError("injected: the broker aborted the transaction at commit")
        written.error = write._abort(written.partition.producer, injected)  # a real abort on the broker
        return
    _real_commit(self, written, group)


write.Writer._commit = _commit  # type: ignore[method-assign]
