"""The apply step: after a partition's transaction, commit what it folded, or say why not.

The Kafka Streams model: the owner folded its events into its batch when it decided them;
once their transaction has committed, the batch (with each event's log position and the
applied offset) is committed to the store in one WriteBatch. If the transaction aborted,
the batch is dropped. If something else landed in the log between our events (another
writer's record, a zombie's aborted batch), folding in our own order would not be the log's
order, so the batch is dropped too and the partition restores from the log instead: the
store always equals a rebuild.
"""

from __future__ import annotations

from enum import StrEnum

from engine.errors import FencedError
from engine.runtime.loop.write import Written
from projections.evolve import record_position


class Verdict(StrEnum):
    """How a partition's transaction ended, for what happens next."""

    COMMITTED = "committed"  # folded and stored
    OUT_OF_ORDER = "out_of_order"  # committed, but not folded: restore from the log
    ABORTED = "aborted"  # nothing written: restore, decide again
    FENCED = "fenced"  # a newer owner holds the partition: step down


def commit(written: Written) -> Verdict:
    """Commit the partition's batch if its transaction committed with our events in a row."""
    if isinstance(written.error, FencedError):
        return Verdict.FENCED
    if written.error is not None:
        return Verdict.ABORTED
    partition, staged = written.partition, written.staged
    if staged.next_command_offset is not None:
        partition.committed_command_offset = staged.next_command_offset
    n = len(staged.events)
    if n:
        if written.first is None or written.last is None or written.first != partition.next_offset \
                or written.last - written.first != n - 1:
            return Verdict.OUT_OF_ORDER
        batch, offset = partition.batch, written.first
        for event, folded in zip(staged.events, staged.folds):
            record_position(batch, event, folded.status, offset)
            offset += 1
        partition.next_offset = written.last + 2  # after our last event, its transaction's commit marker
        batch.commit()
    return Verdict.COMMITTED
