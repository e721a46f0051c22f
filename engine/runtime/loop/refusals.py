"""Transactions the brokers refuse for want of an ACL: the source of truth for how an owner backs off.

A refused transaction wrote nothing. Deciding the same commands again at once would be refused
again, tens of times a second, for as long as the grant is missing (each try leaves an aborted
batch in the log). So the owner says what is missing in one ERROR line (the operation and the
topic, group or transactional id: ``kafka.explain_refusal``), restores the partition from the log
as after any abort, and decides again only after a hold that doubles with each refusal in a row,
up to ``MAX_HOLD_S``. The first transaction the brokers accept ends the episode.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.runtime.loop.partition import Partition

log = logging.getLogger("epochq.engine")

FIRST_HOLD_S = 0.5
MAX_HOLD_S = 30.0


def hold_s(refusals: int) -> float:
    """How long a partition waits before deciding again after its ``refusals``-th refusal in a row. Pure."""
    return min(MAX_HOLD_S, FIRST_HOLD_S * float(2 ** max(0, min(refusals - 1, 16))))


def refused(partition: Partition, error: Exception | None) -> float:
    """A transaction of ``partition`` was refused: say so (once); until when (monotonic) it holds before it decides
    again (the loop restores it meanwhile)."""
    refusals = partition.refused()
    hold = hold_s(refusals)
    if refusals == 1:
        log.error("partition %d: transaction refused: %s; its commands wait until it is granted "
                  "(tried again in %.1f s, then ever less often, at most every %.0f s)",
                  partition.number, error, hold, MAX_HOLD_S)
    else:
        log.info("partition %d: transaction refused again (%d in a row); next try in %.1f s",
                 partition.number, refusals, hold)
    return time.monotonic() + hold


def accepted(partition: Partition) -> None:
    """A transaction of ``partition`` committed: an episode of refusals, if any, is over."""
    refused = partition.accepted()
    if refused:
        log.warning("partition %d: the brokers accept its transactions again (after %d refused)",
                    partition.number, refused)
