"""Records handlers produce (``ctx.produce``), written in the transaction that records their success.

- **stage**: when the results step decides a finished attempt and the decision is its
  ``JobSucceeded``, the attempt's records join the draft's staged work (``Staged.outputs``);
  any other decision (a failure, a stale or fenced result) drops them.
- **write**: the write step produces them (``effects_kafka``) after the events, in the same transaction, to the
  topics the handler named (partitioned by their key as Java clients do). They commit with the
  ``JobSucceeded``, or abort with it.
- **refused**: the records were checked before they were staged (size, name, the topic exists and
  is writable: ``engine.runtime.execution.outputs``); if the brokers still refuse one inside the
  transaction (a topic with a smaller ``max.message.bytes``, an ACL revoked meanwhile), its delivery
  report names the attempt. The transaction aborts as a whole, as Kafka transactions do; then the
  attempts whose records were refused are recorded again as failures (``OutputRefusedError``,
  retried by their policy; ``refused_results``, asked by the apply step's ``next_step``) and every
  other job's decision is made again and written in the next transaction, so one handler's record
  never holds up the partition.

Jobs that produce nothing pay one attribute test per finished attempt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.contract import messages as m
from engine.runtime.execution.outputs import OutputRecord
from engine.runtime.execution.verdicts import RunResult

if TYPE_CHECKING:
    from engine.runtime.loop.draft import Staged
    from engine.runtime.loop.write import Written

log = logging.getLogger("epochq.effects")


@dataclass(frozen=True, slots=True)
class Output:
    """The records of one successful attempt, staged with its ``JobSucceeded``."""

    job_id: str
    attempt: int
    records: tuple[OutputRecord, ...]


def stage(staged: Staged, result: RunResult, events: list[m.Event]) -> None:
    """Stage ``result``'s records if its decision (``events``) is the job's success."""
    if any(isinstance(e.body, m.JobSucceeded) for e in events):
        req = result.request
        staged.outputs.append(Output(req.job_id, req.attempt, result.outcome.records))


def refused_results(written: Written) -> list[RunResult] | None:
    """After a failed transaction: its finished attempts with those whose records were refused turned into
    failures (a new list; the staged one is left as it is), or None if no record was refused."""
    if not written.refused:
        return None
    results = []
    for result in written.staged.results:
        why = written.refused.get((result.request.job_id, result.request.attempt))
        if why is not None:
            log.warning("job %s attempt %d: the brokers refused a record it produced (%s); its transaction is "
                        "written again without it and the attempt recorded as failed", result.request.job_id,
                        result.request.attempt, why)
            result = RunResult(result.request, result.outcome.refused(why))
        results.append(result)
    return results
