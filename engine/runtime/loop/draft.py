"""One partition's draft: the write model's transaction buffer, the value the deciding steps take and fill.

A draft is the store's :class:`~projections.batch.Batch` overlay plus what this tick staged
(:class:`Staged`: events, commands, starts, outputs, finished attempts). Every event a step
stages is stamped with the partition's epoch, encoded and folded into the overlay at once, so
the next decision of the tick reads it (a job submitted, queued and started in one tick). The
loop hands the draft to each deciding step (``loop/deciding.py``), takes what was staged for
the write step (:meth:`Draft.take_staged`), and commits the overlay once that transaction
committed (``loop/apply.py``). The draft never sees the partition's lease (its state, offsets,
transaction under way): that is the lifecycle's (``loop/partition.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.contract import messages as m
from engine.contract.codec import encode_event
from engine.contract.headers import TRACEPARENT
from engine.contract.records import builder
from engine.domain.decide import DecideContext, Emit, Input, Send, decide
from engine.domain.fairness import FairState
from engine.domain.jobs import JobView
from engine.errors import ProjectionCorruptedError, ValidationError
from projections.batch import Batch
from projections.evolve import APPLIED, Folded, current_epoch, fold_state
from projections.profile import WRITE_MODEL, Profile
from projections.views.ended import read_ended
from projections.views.jobs import read_job
from projections.views.ready import MIRRORED, ReadyView

if TYPE_CHECKING:  # types only: the step modules import no RocksDB (engine.testing runs them in memory)
    from projections.store import ProjectionStore

log = logging.getLogger("epochq.partition")

MAX_EVENT_BYTES = 1_000_000 - 16 * 1024
"""The largest event the owner stages: under the brokers' default record limit (message.max.bytes,
about 1 MB) with room for the record's headers, so a transaction never fails on a record the broker refuses."""
new_event = builder(m.Event)
Headers = list[tuple[str, str | bytes | None]]
"""A record's headers, as the producer takes them."""

Mark = tuple[int, int, int, int]


@dataclass(slots=True)
class Staged:
    """What one partition decided in this tick: events to write, commands to send, handlers to start."""

    events: list[m.Event] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)
    folds: list[Folded] = field(default_factory=list)  # what folding each event did, in order
    commands: list[m.Command] = field(default_factory=list)
    starts: list[tuple[m.Event, JobView]] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)  # the finished attempts decided here: kept if it aborts
    outputs: list[Any] = field(default_factory=list)  # records handlers produced (loop/effects.py), with their success
    traced: dict[int, Headers] = field(default_factory=dict)
    """The record headers of the events of traced jobs, by index in ``events`` (docs/tracing.md): none for
    an untraced job, so its events are produced exactly as before."""
    first_command_offset: int | None = None
    next_command_offset: int | None = None

    def __bool__(self) -> bool:
        return bool(self.events) or bool(self.commands) or self.next_command_offset is not None

    def mark(self) -> Mark:
        """Where the lists end now (to undo what one input staged)."""
        return len(self.events), len(self.commands), len(self.starts), len(self.outputs)

    def take_results(self) -> list[Any]:
        """The finished attempts decided here, each once (to record again: what they decided is never written)."""
        results, self.results = self.results, []
        return results

    def undo(self, mark: Mark) -> None:
        """Forget what was staged after ``mark``."""
        events, commands, starts, outputs = mark
        del self.events[events:], self.raws[events:], self.folds[events:]
        del self.commands[commands:], self.starts[starts:], self.outputs[outputs:]
        if self.traced:
            self.traced = {i: h for i, h in self.traced.items() if i < events}

    def trace(self, start: int, traceparent: str, replace: bool = True) -> None:
        """Give the events staged from ``start`` on the W3C ``traceparent`` header (``replace=False``: only those
        that have none yet)."""
        headers: Headers = [(TRACEPARENT, traceparent.encode())]
        for i in range(start, len(self.events)):
            if replace or i not in self.traced:
                self.traced[i] = headers


def cancel_requests(staged: Staged) -> list[tuple[str, int]]:
    """The (job id, attempt) of every running attempt this tick asked to stop (``JobCancelRequested``), or handed
    back at the end of a grace period (a ``JobRequeued`` of its own epoch: the next owner runs it again)."""
    return [(e.job_id or "", e.body.attempt) for e in staged.events if isinstance(e.body, m.JobCancelRequested)
            or (isinstance(e.body, m.JobRequeued) and e.body.previous_epoch == e.epoch)]


class Draft:
    """Partition ``number``'s pending decisions over its store, stamped with the epoch it holds."""

    def __init__(self, number: int, owner_id: str, profile: Profile = WRITE_MODEL):
        self.number, self.owner_id, self.profile = number, owner_id, profile
        self.epoch = 0  # the epoch its events carry: set when the partition claims (:meth:`claim`)
        self.seq = 0  # events staged under this epoch: the tail of derived event ids
        self.store: ProjectionStore | None = None
        self.batch: Batch = None  # type: ignore[assignment]  # set when the store opens
        self.ready: ReadyView = None  # type: ignore[assignment]
        self.staged = Staged()
        self.fair: dict[str, FairState] = {}  # each lane's fair-queuing clock, loaded when active
        self.corrupt: ProjectionCorruptedError | None = None  # the store failed a read: wipe and restore it

    def open(self, store: ProjectionStore) -> None:
        """Draft over ``store`` (a fresh one, or the same wiped): nothing staged, the epoch and its ids kept."""
        self.store, self.staged, self.corrupt = store, Staged(), None
        self.ready = ReadyView(store)
        self.batch = Batch(store, self.ready.mirror, MIRRORED, self.profile)

    def claim(self, epoch: int) -> None:
        """Stamp what is staged from now on with ``epoch`` (a new claim: its event ids start again)."""
        self.epoch, self.seq = epoch, 0

    def last_epoch(self) -> int:
        """The newest claim's epoch in the store."""
        return current_epoch(self.batch)

    # --- reading state -------------------------------------------------------------------

    def job(self, job_id: str) -> JobView | None:
        """The job as this tick's decisions leave it (pending batch over store); an ended job as its
        tombstone (state, end, tenant, idempotency key) while the dedup window keeps it."""
        return read_job(self.batch, job_id) or read_ended(self.batch, job_id)

    def context(self, base: DecideContext, now: int) -> DecideContext:
        """The decide context with this draft's epoch and ``now``."""
        return DecideContext(now, self.epoch, base.max_payload_bytes, base.tasks, base.default_policy)

    # --- staging -------------------------------------------------------------------------

    def decide(self, job_id: str | None, given: Input, ctx: DecideContext, cause: str | None = None,
               correlation: str | None = None) -> list[m.Event]:
        """Decide for one job and stage what follows; returns the staged events."""
        job = self.job(job_id) if job_id else None
        return self.take(decide(job, given, ctx), ctx.now, cause, correlation)

    def take(self, outs: list[Emit | Send], now: int, cause: str | None = None,
             correlation: str | None = None) -> list[m.Event]:
        """Stage a decision's events and commands; returns the staged events."""
        staged = []
        for out in outs:
            if isinstance(out, Send):
                self.send(out.command)
            else:
                staged.append(self.stage(out, now, cause, correlation))
        return staged

    def send(self, command: m.Command) -> None:
        """Stage a command to send in this tick's transaction (a scoped job's child, a report, a ping)."""
        self.staged.commands.append(command)

    def stage(self, emit: Emit, at: int, cause: str | None = None, correlation: str | None = None) -> m.Event:
        """Wrap ``emit`` in an envelope with this draft's epoch, encode it and fold it now."""
        self.seq += 1
        event = new_event(f"{self.number}-{self.epoch}-{self.seq}", emit.job_id, emit.tenant_id, self.epoch,
                          self.owner_id, at, emit.body, cause, correlation)
        raw = encode_event(event)
        if len(raw) > MAX_EVENT_BYTES:
            raise ValidationError(f"{event.type} of job {event.job_id} is {len(raw)} bytes encoded; "
                                  f"at most {MAX_EVENT_BYTES} fit in one Kafka record")
        folded = fold_state(self.batch, event)
        staged = self.staged
        staged.events.append(event)
        staged.raws.append(raw)
        staged.folds.append(folded)
        job = folded.after or folded.before
        if job is not None and job.traceparent:
            staged.traced[len(staged.raws) - 1] = [(TRACEPARENT, job.traceparent.encode())]
        if folded.status == APPLIED and isinstance(emit.body, m.JobStarted) and folded.after is not None:
            staged.starts.append((event, folded.after))
        return event

    def consumed(self, offset: int) -> None:
        """The command at ``offset`` was decided; its offset commits with this tick's transaction."""
        if self.staged.first_command_offset is None:
            self.staged.first_command_offset = offset
        self.staged.next_command_offset = offset + 1

    def attempt(self, step: Callable[..., Any], *args: Any) -> BaseException | None:
        """Run one input's step; if it raises, undo what it folded and staged and return the error
        (a corrupt store is not the input's fault: it is kept in :attr:`corrupt` for the loop)."""
        mark = self.staged.mark()
        try:
            step(*args)
        except ProjectionCorruptedError as e:
            self._undo(mark)
            self.corrupt = e
            return None
        except Exception as e:  # noqa: BLE001 - any step may meet a poison input; the caller records it
            self._undo(mark)
            return e
        return None

    def _undo(self, mark: Mark) -> None:
        """Drop what one input staged: fold the tick's earlier events again into a fresh batch.

        Rare (a poison input), so nothing is journaled on the way for it: the batch holds
        exactly the fold of this tick's staged events, so folding those again rebuilds it.
        """
        self.staged.undo(mark)
        self.batch.clear()
        self.ready.clear()
        for event in self.staged.events:
            fold_state(self.batch, event)

    # --- handing over --------------------------------------------------------------------

    def take_staged(self) -> Staged:
        """Hand this tick's decisions to the writer and start afresh (the overlay stays until they commit)."""
        staged, self.staged = self.staged, Staged()
        return staged

    def forget(self) -> None:
        """Drop what was decided but not committed (an aborted transaction, a resync, a step-down)."""
        self.staged = Staged()
        if self.batch is not None:
            self.batch.clear()
            self.ready.clear()
