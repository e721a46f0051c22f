"""The engine process: the composition root, and the ports through which the loop's core meets Kafka, RocksDB,
the executor and the wall clock.

The order of a tick and what each step does are the core's (``loop/core.py``: ``tick``); this module makes
the collaborators (the commands reader, the lifecycle, the writer, the executor, the remote pools) and is
the core's :class:`~engine.runtime.loop.core.Ports` for them::

    read      the inbox, waited on until the next due time: command batches, finished attempts, rebalance notes
    hold      the notes → partitions set up, restored, claimed or resumed (loop/lifecycle.py, loop/restoring.py)
    routed    the reader rewound where the route step asks; records dropped counted
    applied   each transaction's verdict carried out: metrics, cancels, the lifecycle's next move (a store that
              failed to commit is wiped and restored)
    start     adopted remote attempts leased; the attempts granted to remote pools, the rest to the executor
    decided   what the decide step returned: commands counted, timer gauges, a token's wake-up; a store that
              failed a read is wiped
    write     one transaction per partition's staged work, committed on a commit thread; checkpoints due
    settle    revoking partitions closed; standbys folded; tenants, metrics, heartbeat

None of the steps calls back into the engine.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any, TypeVar

from engine.app import App
from engine.clock import now_us
from engine.config import Settings
from engine.domain.decide import DecideContext, RequeueReason
from engine.domain.lanes import Lane
from engine.runtime import kafka
from engine.runtime.kafka import ports
from engine.runtime.execution.executor import Executor, RunRequest, RunResult
from engine.runtime.loop import sampling
from engine.runtime.loop.apply import NextStep, Next
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.bulk import BulkRestores
from engine.runtime.loop.checkpointing import MIN_EVENTS, Checkpointer
from engine.runtime.loop.core import Applied, Core, Read, Rules, decider, tick
from engine.runtime.loop.deciding import Decided
from engine.runtime.loop.heartbeat import Heartbeat
from engine.runtime.loop.inbox import REVOKE_SLACK_S, CommandReader, Inbox, Note, reader_failed, rebalance_timeout_ms
from engine.runtime.loop.lifecycle import Lifecycle
from engine.runtime.loop.options import EngineOptions
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Partition
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.route import Routed
from engine.runtime.loop.standby import Standbys
from engine.runtime.loop.write import Writer, Written, finish
from engine.runtime.observe.metrics import EngineMetrics
from engine.runtime.outputgate import KafkaTopicGate
from engine.runtime.remote.owner import Remote, remote_refusals
from engine.runtime.signatures import CommandChecker, engine_signer
from engine.runtime.tenants import LOAD_TIMEOUT_S, TenantDirectory
from engine.runtime.topics import checkpoints_topic, ensure_schemas_topic, partition_count, topic_exists

log = logging.getLogger("epochq.engine")
T = TypeVar("T")

TENANTS_EVERY_S = 0.1
METRICS_EVERY_S = 5.0
STANDBY_BUDGET_S = 0.01
"""The longest a tick spends folding standby copies (``--standby``): they follow, the owned partitions lead."""
HAND_BACK_S = 3.0
"""How long a stopping engine may take past its grace period to record the hand-back of what still runs."""


class Engine:
    """One engine instance: a member of the group that owns job partitions."""

    def __init__(self, app: App, settings: Settings, options: EngineOptions | None = None,
                 owner_id: str | None = None):
        self.app, self.settings = app, settings
        self.options = options = options or EngineOptions()
        self.owner_id = owner_id or settings.owner_id or kafka.default_owner_id()
        self.stopping = threading.Event()
        base_ctx = DecideContext(0, 0, settings.max_payload_bytes, app.policies())
        self.inbox = Inbox()
        self.executor = Executor(app, options.lane_slots, report=self.inbox.put_result, gate=KafkaTopicGate(settings),
                                 namespace=settings.namespace)
        self.reader = CommandReader(ports.command_source(settings, options.session_timeout_ms,
                                                         rebalance_timeout_ms(options.grace_s)),
                                    settings.commands_topic, self.inbox, options.grace_s + REVOKE_SLACK_S)
        log.info("engine %s: reading %s from Kafka at %s (waits up to %d s for a broker to answer)", self.owner_id,
                 settings.tenants_topic, settings.require_bootstrap(), LOAD_TIMEOUT_S)
        self.tenants = TenantDirectory(settings)  # patient: waits for a broker to answer, says so once
        ensure_schemas_topic(settings)  # every schema this engine writes is in <ns>.schemas before it writes
        self.metrics = EngineMetrics(options.dlq_alert_threshold)
        self.board = board = BreakerBoard({n: b for n in app.task_types if (b := app.spec(n).breaker)})
        self.poison = PoisonDesk(self.metrics.poisoned)
        count = partition_count(settings)
        signer = engine_signer(settings)
        self.writer = Writer(settings.events_topic, settings.commands_topic, count, signer=signer,
                             explain=partial(kafka.explain_refusal, settings))
        self.checkpointer = Checkpointer(settings, self.writer, options.checkpoint_min_events > 0 and
                                         topic_exists(settings, checkpoints_topic(settings)),
                                         options.checkpoint_min_events or MIN_EVENTS)
        bulk = BulkRestores(settings, options.bulk_restore_min) if options.bulk_restore_min else None
        self.remote = remote = Remote(app, settings, no_execute=not options.execute)
        self.lifecycle = Lifecycle(settings, self.owner_id, self.reader, ports.event_log(settings, self.owner_id),
                                   board, self.poison, options.windows, options.grace_s, bulk, self.checkpointer,
                                   base_ctx, remote.attempt_pool)  # remote attempts: adopted, not re-queued
        rules = Rules(settings.commands_topic, count, base_ctx, self.owner_id, options.lane_limits,
                      self.tenants.weight, self.tenants.max_queued, self.tenants.scoped, options.fair,
                      CommandChecker(settings, self.tenants.public_keys, signer), settings.namespace,
                      remote.pool_of if remote.active else None, catalog_pool=remote.pool_of)
        local_slots = self.executor.free_slots if options.execute else _none  # --no-execute: every type is remote
        self.decider = decider(rules, board, self.poison, local_slots,
                               partial(self._pools_free, count) if remote.active else dict)
        self.core = Core(self.decider, self.lifecycle.partitions, self.lifecycle.timers, partial(attempt_timeout, app))
        self.standbys = (Standbys(settings, ports.event_log(settings, f"{self.owner_id}.standby"), count,
                                  self.owner_id)
                         if options.standby else None)
        self._next_tenants = self._next_metrics = 0.0
        self._token_due: int | None = None  # when a rate-limited job's next token is due (µs; Decided.wake_at)
        self.heartbeat = Heartbeat(settings, self.owner_id, task_types=app.task_types,
                                   pools={t: p for t in app.task_types if (p := remote.pool_of(t)) is not None})

    @property
    def partitions(self) -> dict[int, Partition]:
        """The partitions this instance holds (in any state)."""
        return self.lifecycle.partitions

    # --- running -----------------------------------------------------------------------------

    def run(self) -> None:
        """Run until ``stop()``; then hand partitions back gracefully."""
        if self.options.metrics_port is not None:
            self.metrics.serve(self.options.metrics_port, self.options.metrics_addr)
        self.metrics.watch_gc()
        self.reader.start()
        log.info("engine %s started on %s (%s)", self.owner_id, self.settings.commands_topic,
                 self.settings.security_summary())
        try:
            while not self.stopping.is_set():
                self.tick()
            self.drain(self.options.grace_s)
        finally:
            self.shutdown()

    def stop(self) -> None:
        """Ask the loop to stop taking work and shut down (safe from signal handlers)."""
        self.stopping.set()
        self.inbox.wake()

    def tick(self, taking: bool = True) -> None:
        """One round of the loop (``loop/core.py``'s tick over this engine's ports); ``taking=False`` (draining)
        records results but starts nothing new."""
        tick(self.core, self, taking)

    # --- the ports the core's tick drives (loop/core.py: Ports) ----------------------------------

    def clock(self) -> int:
        """The wall clock (µs)."""
        return now_us()

    def read(self) -> Read:
        """Wait for what arrives (up to the next due time); the commands read, the attempts finished, the notes."""
        arrivals = self.inbox.take(self._wait())
        reader_failed(self.reader)
        commands = _drain(self.inbox.commands)  # taken as the route step goes
        return Read(commands, self._finished(arrivals.results), arrivals.notes)

    def hold(self, read: Read, now: int) -> None:
        """Act on the rebalance notes; set up, restore and claim partitions."""
        self._hold(read.notes, now)

    def finished(self, ended: list[Written]) -> None:
        """Collect the ended transactions' delivery reports."""
        for w in ended:
            finish(w)

    def start(self, starts: list[RunRequest]) -> None:
        """Lease what was adopted and granted to remote pools; hand the rest to the executor."""
        self._adopt()
        starts = self.remote.grant(starts)
        if starts:
            self.executor.submit_many(starts)

    def progress(self) -> list[tuple[RunRequest, float | None, str]]:
        """The progress the executor's handlers (and remote workers' heartbeats) reported."""
        return self.executor.take_progress() + self.remote.renew() if self.remote.active \
            else self.executor.take_progress()

    def timed(self, apply_s: float, decide_s: float, write_s: float) -> None:
        """The tick's step timings, as metrics."""
        self.metrics.tick(decide_s, write_s, apply_s)

    def _wait(self) -> float:
        """How long the loop may sleep: until the next timer or deadline, at most ``idle_s``."""
        token = self._token_due  # the last decide step's: noted again by jobs still waiting for one
        if self.lifecycle.restoring or any(p.inbound.commands or p.inbound.results for p in self.partitions.values()
                                           if p.can_decide):
            return 0.0
        wait = self.options.idle_s
        dues = [t.next_due() for n, t in self.lifecycle.timers.items()
                if (p := self.partitions.get(n)) is not None and p.can_decide]  # a writing one wakes us when done
        soonest = min((d for d in [*dues, token] if d is not None), default=None)
        if soonest is not None:
            wait = min(wait, max(0.0, soonest / 1e6 - time.time()))
        deadline = min(self.executor.next_deadline(), self.remote.leases.next_deadline())
        return min(wait, max(0.0, deadline - time.time()))

    # --- hold and route ------------------------------------------------------------------------

    def _hold(self, notes: list[Note], now: int) -> None:
        """Act on the rebalance notes; set up, restore and claim partitions."""
        for note in notes:
            self.lifecycle.note(note)
        if self.standbys is not None:
            self.standbys.follow(set(self.partitions))  # hand over the copies of partitions now assigned
        self.lifecycle.set_up()
        for partition, event in self.lifecycle.restore(now):  # records the restore found not counting
            sampling.unknown_write(self.metrics, partition, event)

    def _finished(self, results: list[Any]) -> list[RunResult]:
        """The attempts that finished: ``results`` as the executor reported them (None: a wake-up), and those whose
        deadline passed."""
        settled = [r for r in (self.executor.settle(item) for item in results if item) if r]
        return settled + self.executor.expire() + self.remote.expire()

    def routed(self, routed: Routed) -> None:
        """Carry out what the route step could not place: count the records dropped, rewind the reader."""
        self.inbox.decided(routed.dropped)
        for rewind in routed.rewinds:
            self.partitions[rewind.partition].rewound(self.reader.seek(rewind.partition, rewind.offset))

    # --- apply, decide, write -------------------------------------------------------------------

    def applied(self, applied: Applied, now: int) -> None:
        """Carry out one transaction's verdict: count and cancel what its events say, then its partition's next
        state (a store that failed to commit its batch is wiped and restored)."""
        w, step = applied.written, applied.step
        if applied.counted:
            for event, folded in zip(w.staged.events, w.staged.folds):
                self.metrics.observe(event, folded.status, folded.before, folded.after)
            for job_id, attempt in applied.cancels:
                self.executor.cancel(job_id, attempt, self.options.cancel_grace_s)
        if applied.corrupt is not None:
            self.inbox.decided(w.partition.inbound.drop_commands())
            self.lifecycle.corrupted(w.partition, applied.corrupt)
            return
        if w.refused and not step.counted:  # remote results' records refused: decided again as failures
            self.decider.admission.refused_outputs.update(remote_refusals(w))
        self._carry_out(w, step, now)

    def _adopt(self) -> None:
        """Lease the remote attempts the partitions activated since the last call adopted (``loop/orphans.py``)."""
        adopted = self.lifecycle.take_adopted()
        if adopted:
            self.remote.adopt(adopted)

    def _carry_out(self, w: Written, step: NextStep, now: int) -> None:
        """Carry out the apply step's verdict on one partition: its queues and the metrics here, its state by the
        lifecycle."""
        partition = w.partition
        if step.next is Next.STEP_DOWN:
            self.metrics.producer_fenced()
            log.error("partition %d fenced at epoch %d: %s", partition.number, partition.epoch, w.error)
        elif step.next is Next.RECREATE:
            self.metrics.producer_recreated()
            self.inbox.decided(partition.inbound.drop_commands())  # read again from the committed offset
        elif step.next is Next.BACK_OFF or step.next is Next.RESYNC:
            if step.keep_results:
                kept = w.staged.take_results()
                partition.inbound.keep_results(list(step.results) if step.results is not None else kept)
            self.inbox.decided(partition.inbound.drop_commands())
        self.lifecycle.carry_out(partition, step, w.error, now)

    def decided(self, decided: Decided) -> None:
        """Carry out what the decide step returned; wipe and restore the stores that failed a read."""
        self.inbox.decided(decided.commands)
        self._token_due = decided.wake_at
        for number, overdue in decided.overdue.items():
            self.metrics.timers_overdue.inc(overdue)
            log.info("partition %d: overdue sweep fired %d job(s) the hot set did not hold",
                     number, overdue, extra={"partition": number})
        for number, held in decided.promoted.items():
            self.metrics.set_timers(number, held)
        for partition in [p for p in self.partitions.values() if p.draft.corrupt is not None]:
            self.inbox.decided(partition.inbound.drop_commands())
            partition.inbound.keep_results(partition.draft.staged.take_results())
            self.lifecycle.corrupted(partition, partition.draft.corrupt)  # type: ignore[arg-type]

    def write(self, work: list[tuple[Partition, Staged]]) -> list[Written]:
        """Begin one transaction for each partition's staged work (its remote dispatches, slots and cancels in
        it), and a checkpoint for each partition due one; the transactions begun."""
        begun = []
        for partition, staged in work:
            self.remote.stage(staged, partition.number, partition.draft.batch)  # dispatches: same transaction
            self.remote.settle(staged.events)  # attempts it ends free their pool's slot (a redo decides again)
            self.remote.stage_cancels(staged, self.options.cancel_grace_s)  # told to the worker that runs it
            begun.append(self.writer.launch(partition, staged, self.reader.group_metadata(), self.inbox.wake))
        launched = {partition.number for partition, _ in work}  # under way from now (the core marks them after)
        for partition in self.partitions.values():
            if partition.number not in launched and self.checkpointer.due(partition):
                begun.append(self.checkpointer.launch(partition, self.inbox.wake))  # woken when committed
        return begun

    # --- settle, housekeeping and stopping ----------------------------------------------------

    def settle(self, taking: bool, now: int) -> None:
        """Close revoking partitions whose handlers are done (re-queue what outlived the grace period first); fold
        the standbys; tenants, metrics, heartbeat."""
        self.lifecycle.settle_revoking(self.executor.in_flight, now)
        if self.remote.active:  # a partition no longer ours: its new owner adopts what its workers run
            self.remote.leases.keep({n for n, p in self.partitions.items() if p.deciding or p.resuming})
        if self.standbys is not None and taking:
            self.standbys.step(STANDBY_BUDGET_S)
        self._housekeeping()

    def _housekeeping(self) -> None:
        if self.lifecycle.take_changed():  # a partition was taken or given back: the gauges, a heartbeat soon
            self.metrics.rebalanced()
            self.heartbeat.soon()
            self.metrics.set_ownership({p.number: p.epoch for p in self.partitions.values() if p.deciding})
        clock = time.monotonic()
        if clock >= self._next_tenants:
            self._next_tenants = clock + TENANTS_EVERY_S
            self.tenants.refresh()
        if clock >= self._next_metrics:
            self._next_metrics = clock + METRICS_EVERY_S
            sampling.sample(self.metrics, self.partitions.values(), self.standbys)
            self.metrics.set_pools(self.remote.gauges())
            if self.remote.active:
                self.metrics.set_pools_queued(sampling.pools_queued(self.partitions.values(), self.remote.pool_of,
                                                                    self.remote.pools))
        self.heartbeat.beat(self.partitions.values(), self.executor, self.options.lane_slots)

    def _pools_free(self, count: int) -> dict[str, int]:
        """Per remote pool, how many attempts its workers take from this instance now."""
        return self.remote.free(sum(1 for p in self.partitions.values() if p.deciding), count)

    def drain(self, grace_s: float) -> None:
        """Stop taking work; record in-flight results until every handler is done or ``grace_s`` passed."""
        log.info("engine %s shutting down (grace %.1fs)", self.owner_id, grace_s)
        self.lifecycle.revoke(list(self.partitions), grace_s, RequeueReason.OWNER_STOPPED)
        deadline = time.monotonic() + grace_s + HAND_BACK_S
        while self.partitions and time.monotonic() < deadline:
            self.tick(taking=False)

    def shutdown(self) -> None:
        """Close what is still held, leave the group, stop every thread."""
        for w in self.core.writing:
            finish(w)  # never close a store under a transaction still being committed
        self.core.writing.clear()
        self.lifecycle.close_all()
        if self.standbys is not None:
            self.standbys.close()
            self.standbys.events.close()
        self.reader.stop()
        self.lifecycle.events.close()
        self.tenants.close()
        self.metrics.close()
        self.executor.shutdown(0)
        self.writer.close()
        self.heartbeat.close()
        self.remote.close()


def _none(lane: Lane) -> int:
    """No local slot: an engine run with ``--no-execute`` runs nothing itself."""
    return 0


def attempt_timeout(app: App, task_type: str) -> float:
    """How long an attempt of ``task_type`` may run (s): its spec's timeout (60 for a type the app does not know)."""
    try:
        return float(app.spec(task_type).timeout)
    except Exception:  # noqa: BLE001 - unknown types fail inside the executor with a clear error
        return 60.0


def _drain(waiting: collections.deque[T]) -> Iterator[T]:
    """Take the items of ``waiting`` from the left, each once, until it is empty."""
    while waiting:
        yield waiting.popleft()
