"""The apply step: after a partition's transaction, commit what it folded, or say why not.

The Kafka Streams model: the owner folded its events into its batch when it decided them;
once their transaction has committed, the batch (with each event's log position and the
applied offset) is committed to the store in one WriteBatch. If the transaction aborted,
the batch is dropped. If something else landed in the log between our events (another
writer's record, a zombie's aborted batch), folding in our own order would not be the log's
order, so the batch is dropped too and the partition restores from the log instead: the
store always equals a rebuild. That restore reads at least up to the end of the transaction
that just committed (``Offsets.written_end``): a read_committed reader's end (the last
stable offset) can still lie before it, while its commit markers are being written or while
a foreign transaction is open before it, and a store short of the owner's own committed
decisions would see its running jobs as queued and drop their results.

The step returns its verdict as data (:func:`judge`: how the transaction ended and where the
partition's offsets stand after it; :class:`NextStep`: go on, activate, step down, set up again, drop,
back off, resync) and the attempts to start (:func:`run_requests`); the loop keeps the offsets,
commits the batch (:func:`commit`) and carries out the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from engine.domain.lanes import Lane
from engine.errors import CorruptedError, FatalError, PartitionLostError
from engine.runtime.execution.verdicts import RunRequest, RunResult
from engine.runtime.loop import effects
from engine.runtime.loop.partition import Offsets, State
from engine.runtime.loop.written import Written
from projections.evolve import record_position
from projections.views.dependencies import read_reports


class Verdict(StrEnum):
    """How a partition's transaction ended, for what happens next."""

    COMMITTED = "committed"  # folded and stored
    OUT_OF_ORDER = "out_of_order"  # committed, but not folded: restore from the log
    ABORTED = "aborted"  # nothing written: restore, decide again
    FENCED = "fenced"  # a newer owner holds the partition: step down
    PRODUCER_FAILED = "producer_failed"  # the producer died, not fenced: a new one, restore, claim again
    REFUSED = "refused"  # nothing written, for want of an ACL: say so once, restore, try again later


def judge(written: Written) -> tuple[Verdict, Offsets]:
    """How ``written``'s transaction ended, and where its partition stands after it (the loop keeps that). Pure.

    Our events count in our order only if they landed in a row where the partition expected them. A failed
    transaction is judged by its error's group (engine/errors.py): lost (fenced), corrupted (a failed producer),
    fatal (a refusal only an operator fixes: hold, loop/refusals.py), anything else aborted."""
    offsets = written.partition.offsets
    if isinstance(written.error, PartitionLostError):
        return Verdict.FENCED, offsets
    if isinstance(written.error, CorruptedError):
        return Verdict.PRODUCER_FAILED, offsets
    if isinstance(written.error, FatalError):
        return Verdict.REFUSED, offsets
    if written.error is not None:
        return Verdict.ABORTED, offsets
    staged, commands = written.staged, offsets.commands
    if staged.next_command_offset is not None:
        commands = staged.next_command_offset
    if written.checkpoint is not None:  # a checkpoint counts once its transaction has committed
        offsets = offsets.checkpointed(written.checkpoint)
    n = len(staged.events)
    if not n:
        return Verdict.COMMITTED, replace(offsets, commands=commands)
    end = max(offsets.written_end, written_end(written, n))
    if written.first is None or written.last is None or written.first != offsets.next_event \
            or written.last - written.first != n - 1:
        return Verdict.OUT_OF_ORDER, replace(offsets, commands=commands, written_end=end)
    # our next event lands after our last one and its transaction's commit marker
    return Verdict.COMMITTED, replace(offsets, commands=commands, written_end=end, next_event=written.last + 2)


def commit(written: Written) -> None:
    """Commit the partition's draft (its batch), each event at its log position, for a transaction judged
    COMMITTED (:func:`judge`)."""
    staged = written.staged
    if not staged.events:
        return
    batch, offset = written.partition.draft.batch, written.first
    assert offset is not None
    for event, folded in zip(staged.events, staged.folds):
        record_position(batch, event, folded.status, offset)
        offset += 1
    batch.commit()


def written_end(written: Written, n: int) -> int:
    """Where the log ends at least, now that ``written``'s ``n`` events committed: after its commit marker.

    Without a delivery report, the events landed no earlier than where the partition expected them."""
    if written.last is not None:
        return written.last + 2
    return written.partition.offsets.next_event + n + 1


class Next(StrEnum):
    """What the loop does with a partition after its transaction's verdict."""

    GO_ON = "go_on"  # committed: nothing to do (an episode of refusals, if any, is over)
    ACTIVATE = "activate"  # its claim committed: it is active now
    STEP_DOWN = "step_down"  # fenced: a newer owner holds it
    RECREATE = "recreate"  # its producer died unfenced: set it up again with a new one, if the group still says so
    DROP = "drop"  # not committed while handing back: forget it
    BACK_OFF = "back_off"  # refused for want of an ACL: restore, hold, try again (loop/refusals.py)
    RESYNC = "resync"  # aborted or out of order: restore from the log, decide again


@dataclass(frozen=True, slots=True)
class NextStep:
    """The apply step's verdict on one transaction, as data: what comes next for its partition."""

    verdict: Verdict
    next: Next
    why: str = ""
    rewind: int | None = None  # read the commands again from here (None: from the last committed offset)
    keep_results: bool = False  # record the results it carried again
    results: tuple[RunResult, ...] | None = None  # ...as these: refused records' attempts as failures (loop/effects)

    @property
    def counted(self) -> bool:
        """Whether its events are in the log (committed, in our order or not): start and cancel what they say."""
        return self.verdict is Verdict.COMMITTED or self.verdict is Verdict.OUT_OF_ORDER


def next_step(written: Written, verdict: Verdict, state: State) -> NextStep:
    """What comes next for a partition in ``state`` whose transaction ended with ``verdict``. Pure."""
    if verdict is Verdict.FENCED:
        return NextStep(verdict, Next.STEP_DOWN, "fenced")
    if verdict is Verdict.PRODUCER_FAILED:
        if state is State.REVOKING:
            return NextStep(verdict, Next.DROP, f"{written.error} while handing back")
        return NextStep(verdict, Next.RECREATE, str(written.error))
    results = effects.refused_results(written) if verdict in (Verdict.ABORTED, Verdict.REFUSED) else None
    if results is not None:
        verdict = Verdict.ABORTED  # a handler's record was refused, not the partition's writes
    if verdict is Verdict.COMMITTED:
        return NextStep(verdict, Next.ACTIVATE if state is State.CLAIMING else Next.GO_ON)
    if state is State.REVOKING:
        return NextStep(verdict, Next.DROP, f"transaction {verdict} while handing back")
    rewind = written.staged.first_command_offset
    if verdict is Verdict.REFUSED:
        return NextStep(verdict, Next.BACK_OFF, str(written.error), rewind)
    if verdict is Verdict.OUT_OF_ORDER:
        return NextStep(verdict, Next.RESYNC, "another writer's record lies between ours")
    return NextStep(verdict, Next.RESYNC, f"transaction aborted ({written.error})", rewind, keep_results=True,
                    results=None if results is None else tuple(results))


def run_requests(written: Written, timeout_of: Callable[[str], float], now: float) -> list[RunRequest]:
    """The attempts whose JobStarted committed in ``written``, each with its deadline from ``now`` (s)."""
    number = written.partition.number
    return [RunRequest(partition=number, epoch=event.epoch, job_id=job.job_id, tenant=job.tenant_id,
                       task_type=job.task_type, attempt=event.body.attempt, lane=Lane(job.lane),  # type: ignore[union-attr]
                       payload=job.payload, idempotency_key=job.idempotency_key,
                       deadline=now + timeout_of(job.task_type), queued_at_us=job.queued_at or job.submitted_at,
                       dependencies=read_reports(written.partition.draft.batch, job) if job.depends_on else None,
                       traceparent=job.traceparent, replays=job.replays)
            for event, job in written.staged.starts]
