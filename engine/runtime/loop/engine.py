"""The engine process: one loop, and the only place that knows the order of its steps.

Per tick, over what arrived since the last one::

    read      wait on the inbox: command batches, handler results, rebalance notes
    hold      act on the notes; set up, restore and claim partitions
    decide    commands → results → due timers → free slots, per active partition; every
              decision is folded into the partition's batch as it is staged
    write     one transaction per partition: events, sent commands, consumed offsets
    apply     commit each batch whose transaction committed; resync or step down the others
    start     hand the committed starts to the executor

Each step is a function or a small object that takes data and returns data; collaborators
are passed to it, none reaches back into the engine.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import cast

from engine.app import App
from engine.clock import now_us
from engine.config import Settings
from engine.contract import messages as m
from engine.domain.decide import DecideContext
from engine.domain.lanes import RUNNABLE_LANES, Lane
from engine.errors import ProjectionCorruptedError
from engine.runtime import kafka
from engine.runtime.kafka import Message
from engine.runtime.execution.executor import Executor, RunRequest
from engine.runtime.loop import outcomes, refusals, sampling
from engine.runtime.loop.admit import Admission
from engine.runtime.loop.apply import Verdict, commit
from engine.runtime.loop.breakers import BreakerBoard
from engine.runtime.loop.bulk import BulkRestores
from engine.runtime.loop.checkpointing import MIN_EVENTS, Checkpointer
from engine.runtime.loop.dispatch import Dispatcher, rotate, slots_spoken_for
from engine.runtime.loop.heartbeat import Heartbeat
from engine.runtime.loop.inbox import Arrivals, CommandReader, Inbox, reader_failed
from engine.runtime.loop.lifecycle import Lifecycle
from engine.runtime.loop.options import EngineOptions
from engine.runtime.loop.partition import Partition, State, cancel_requests
from engine.runtime.loop.poison import PoisonDesk
from engine.runtime.loop.standby import Standbys
from engine.runtime.loop.write import Writer, Written, finish
from engine.runtime.observe.metrics import EngineMetrics
from engine.runtime.signatures import CommandChecker, engine_signer, signature_of
from engine.runtime.tenants import LOAD_TIMEOUT_S, TenantDirectory
from engine.runtime.topics import checkpoints_topic, ensure_schemas_topic, partition_count, topic_exists

log = logging.getLogger("epochq.engine")

TENANTS_EVERY_S = 0.1
METRICS_EVERY_S = 5.0
ADMIT_BUDGET_S = 0.02
STANDBY_BUDGET_S = 0.01
"""The longest a tick spends folding standby copies (``--standby``): they follow, the owned partitions lead."""
"""The longest a tick spends deciding commands; the rest wait for the next tick, so a backlog of
commands never holds up recording results and starting jobs for more than this."""


class Engine:
    """One engine instance: a member of the group that owns job partitions."""

    def __init__(self, app: App, settings: Settings, options: EngineOptions | None = None,
                 owner_id: str | None = None):
        self.app, self.settings = app, settings
        self.options = options = options or EngineOptions()
        self.owner_id = owner_id or settings.owner_id or kafka.default_owner_id()
        self.stopping = threading.Event()
        self.base_ctx = DecideContext(0, 0, settings.max_payload_bytes, app.policies())
        self.inbox = Inbox()
        self.executor = Executor(app, options.lane_slots, report=self.inbox.put_result)
        self.reader = CommandReader(kafka.commands_consumer(settings, options.session_timeout_ms),
                                    settings.commands_topic, self.inbox, options.grace_s + 5.0)
        log.info("engine %s: reading %s from Kafka at %s (waits up to %d s for a broker to answer)", self.owner_id,
                 settings.tenants_topic, settings.require_bootstrap(), LOAD_TIMEOUT_S)
        self.tenants = TenantDirectory(settings)  # patient: waits for a broker to answer, says so once
        ensure_schemas_topic(settings)  # every schema this engine writes is in <ns>.schemas before it writes
        self.metrics = EngineMetrics(options.dlq_alert_threshold)
        self.board = BreakerBoard({n: b for n in app.task_types if (b := app.spec(n).breaker)})
        self.poison = PoisonDesk(self.metrics.poisoned)
        bulk = BulkRestores(settings, options.bulk_restore_min) if options.bulk_restore_min else None
        self.lifecycle = Lifecycle(settings, self.owner_id, self.reader, kafka.events_reader(settings, self.owner_id),
                                   self.board, self.poison, options.windows, options.grace_s, self._owned_changed,
                                   self._unknown_write, bulk)
        count = partition_count(settings)
        signer = engine_signer(settings)
        self.writer = Writer(settings.events_topic, settings.commands_topic, count, signer=signer,
                             explain=partial(kafka.explain_refusal, settings))
        self.checkpointer = Checkpointer(settings, self.writer, options.checkpoint_min_events > 0 and
                                         topic_exists(settings, checkpoints_topic(settings)),
                                         options.checkpoint_min_events or MIN_EVENTS)
        self.lifecycle.on_close = self.checkpointer.on_close
        self.admission = Admission(settings.commands_topic, count, self.base_ctx.tasks, options.lane_limits,  # type: ignore[arg-type]
                                   self.tenants.max_queued, self._scope, self.poison,
                                   lambda p: self.lifecycle.timers[p.number].desk,
                                   CommandChecker(settings, self.tenants.public_keys, signer))
        self.standbys = (Standbys(settings, kafka.events_reader(settings, f"{self.owner_id}.standby"), count,
                                  self.owner_id)
                         if options.standby else None)
        self.dispatcher = Dispatcher(self.board, self.tenants.weight, self.owner_id, self.poison.job, options.fair)
        self._turn = 0
        self._writing: list[Written] = []  # transactions under way
        self._next_tenants = self._next_metrics = 0.0
        self.heartbeat = Heartbeat(settings, self.owner_id, task_types=app.task_types)

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
        self.inbox.put_result(None)  # wake the loop

    def tick(self, taking: bool = True) -> None:
        """One round of the loop; ``taking=False`` (draining) records results but starts nothing new."""
        arrivals = self.inbox.take(self._wait())
        reader_failed(self.reader)
        now = now_us()
        for note in arrivals.notes:
            self.lifecycle.note(note)
        if self.standbys is not None:
            self.standbys.follow(set(self.partitions))  # hand over the copies of partitions now assigned
        self.lifecycle.set_up()
        self.lifecycle.restore(now)
        self._route(arrivals)
        t0 = time.perf_counter()
        self._apply([w for w in self._writing if w.done])
        t1 = time.perf_counter()
        self._decide(now, taking)
        for partition in [p for p in self.partitions.values() if p.corrupt is not None]:
            self._drop_commands(partition)
            partition.keep_results(partition.staged)
            self.lifecycle.corrupted(partition, partition.corrupt)  # type: ignore[arg-type]
        t2 = time.perf_counter()
        self._launch()
        self.metrics.tick(t2 - t1, time.perf_counter() - t2, t1 - t0)
        self.lifecycle.settle_revoking(self.executor.in_flight)
        if self.standbys is not None and taking:
            self.standbys.step(STANDBY_BUDGET_S)
        self._housekeeping()

    def _wait(self) -> float:
        """How long the loop may sleep: until the next timer or deadline, at most ``idle_s``."""
        token, self.dispatcher.wake.at = self.dispatcher.wake.at, None  # noted again by jobs still waiting for one
        if self.lifecycle.restoring or any(p.commands or p.results for p in self.partitions.values() if p.can_decide):
            return 0.0
        wait = self.options.idle_s
        dues = [t.next_due() for n, t in self.lifecycle.timers.items()
                if (p := self.partitions.get(n)) is not None and p.can_decide]  # a writing one wakes us when done
        soonest = min((d for d in [*dues, token] if d is not None), default=None)
        if soonest is not None:
            wait = min(wait, max(0.0, soonest / 1e6 - time.time()))
        return min(wait, max(0.0, self.executor.next_deadline() - time.time()))

    # --- read: what arrived goes to its partition ----------------------------------------------

    def _route(self, arrivals: Arrivals) -> None:
        """Hand each command record and each finished attempt to its partition's queue."""
        waiting = self.inbox.commands
        while waiting:
            self._route_command(*waiting.popleft())
        results = [r for r in (self.executor.settle(item) for item in arrivals.results if item) if r]
        for result in results + self.executor.expire():
            partition = self.partitions.get(result.request.partition)
            if partition is not None and (partition.deciding or partition.resuming):  # resuming: same epoch
                partition.results.append(result)  # recorded once it decides again (a resync must not lose it)
            else:
                log.warning("dropping result of job %s attempt %d: partition %d is no longer ours",
                            result.request.job_id, result.request.attempt, result.request.partition)

    def _route_command(self, tag: int, msg: Message) -> None:
        if msg.error():
            log.warning("commands consumer: %s", msg.error())
            self.inbox.decided(1)
            return
        # The stubs type partition() and offset() as optional, for error messages; a record has both, and a
        # null value goes to admission as it is (quarantined there).
        number, offset = cast(int, msg.partition()), cast(int, msg.offset())
        partition = self.partitions.get(number)
        if partition is not None and tag >= partition.accept_tag and partition.state is State.ACTIVE:
            partition.commands.append((offset, msg.value(), signature_of(msg.headers())))
            return
        self.inbox.decided(1)  # not ours any more, or read before we rewound: dropped
        if partition is not None and tag >= partition.accept_tag and \
                partition.state in (State.RESTORING, State.CLAIMING):  # read again once active
            partition.accept_tag = self.reader.seek(partition.number, offset)

    def _drop_commands(self, partition: Partition) -> None:
        self.inbox.decided(partition.drop_commands())

    # --- decide ------------------------------------------------------------------------------

    def _decide(self, now: int, taking: bool) -> None:
        deciding = [p for p in self.partitions.values() if p.can_decide]
        ctxs = {p.number: p.context(self.base_ctx, now) for p in deciding}
        for partition in deciding:
            if partition.results:
                results, partition.results = partition.results, []
                partition.staged.results += results  # recorded again if what they decide is never written
                outcomes.record(self.partitions, results, self.board, self.poison, ctxs)
        outcomes.record_progress(self.partitions, self.executor.take_progress(), ctxs)
        if not taking:
            return
        active = [p for p in deciding if p.state is State.ACTIVE]
        self._commands(active, ctxs)
        for partition in active:
            self._fire_timers(partition, ctxs[partition.number])
        self._dispatch(active, ctxs)

    def _commands(self, active: list[Partition], ctxs: dict[int, DecideContext]) -> None:
        """Decide waiting commands, a few per partition in turn, for at most ADMIT_BUDGET_S."""
        budget_ends = time.perf_counter() + ADMIT_BUDGET_S
        queued = [p for p in active if p.commands]
        while queued and time.perf_counter() < budget_ends:
            for partition in queued:
                ctx, commands = ctxs[partition.number], partition.commands
                n = min(len(commands), 32)
                for _ in range(n):
                    offset, raw, signature = commands.popleft()
                    self.admission.admit(partition, offset, raw, ctx, signature)
                self.inbox.decided(n)
            queued = [p for p in queued if p.commands]

    def _fire_timers(self, partition: Partition, ctx: DecideContext) -> None:
        timers = self.lifecycle.timers[partition.number]
        promoted, overdue = timers.tick(ctx)
        if overdue:
            self.metrics.timers_overdue.inc(overdue)
            log.info("partition %d: overdue sweep fired %d job(s) the hot set did not hold",
                     partition.number, overdue, extra={"partition": partition.number})
        if promoted:
            self.metrics.set_timers(partition.number, timers.held())

    def _dispatch(self, active: list[Partition], ctxs: dict[int, DecideContext]) -> None:
        if not active:
            return
        self._turn += 1
        taken = slots_spoken_for(self.partitions.values(), self._writing)
        for lane in RUNNABLE_LANES:
            free = self.executor.free_slots(lane) - taken[lane.value]
            if free > 0:
                self.dispatcher.deal(lane.value, free, rotate(active, self._turn), lambda p: ctxs[p.number])

    def _scope(self, scope: str | None) -> tuple[str, ...]:
        """The tenants a scoped job fans out to, from the tenants table as it is now (then recorded)."""
        if scope == "global":
            return tuple(sorted(self.tenants.all()))
        if scope and scope.startswith("product:"):
            return tuple(sorted(self.tenants.tenants_of_product(scope.split(":", 1)[1])))
        return ()

    # --- write, apply, start --------------------------------------------------------------------

    def _launch(self) -> None:
        """Start one transaction for each partition with staged work and none under way."""
        writing = (State.ACTIVE, State.REVOKING, State.CLAIMING)
        for partition in self.partitions.values():
            if partition.staged and partition.writing is None and partition.state in writing:
                written = self.writer.launch(partition, partition.take_staged(), self.reader.group_metadata(),
                                             self._wake)
                partition.writing = written
                self._writing.append(written)
            elif self.checkpointer.due(partition):
                partition.writing = written = self.checkpointer.launch(partition, self._wake)
                self._writing.append(written)

    def _wake(self) -> None:
        self.inbox.put_result(None)  # a commit thread finished: the loop applies it next tick

    def _apply(self, written: list[Written]) -> None:
        starts: list[RunRequest] = []
        for w in written:
            self._writing.remove(w)
            w.partition.writing = None
            finish(w)
            if self.partitions.get(w.partition.number) is not w.partition:
                continue  # dropped meanwhile (lost or fenced): nothing of it may be applied
            try:
                verdict = commit(w)
            except ProjectionCorruptedError as e:
                self._drop_commands(w.partition)
                self.lifecycle.corrupted(w.partition, e)
                starts += self._requests(w)
                continue
            if verdict in (Verdict.COMMITTED, Verdict.OUT_OF_ORDER):
                self._observe(w)
                starts += self._requests(w)
                for job_id, attempt in cancel_requests(w.staged):
                    self.executor.cancel(job_id, attempt, self.options.cancel_grace_s)
            self._after(w, verdict)
        if starts:
            self.executor.submit_many(starts)

    def _after(self, w: Written, verdict: Verdict) -> None:
        partition = w.partition
        if verdict is Verdict.FENCED:
            self.metrics.producer_fenced()
            log.error("partition %d fenced at epoch %d: %s", partition.number, partition.epoch, w.error)
            self.lifecycle.step_down(partition.number, "fenced")
            return
        if verdict is Verdict.COMMITTED:
            refusals.accepted(partition)
            if partition.state is State.CLAIMING:
                self.lifecycle.activate(partition, now_us())
        elif partition.state is State.REVOKING:
            self.lifecycle.drop(partition.number, f"transaction {verdict} while handing back")
        elif verdict is Verdict.REFUSED:
            self._drop_commands(partition)
            refusals.refused(self.lifecycle, partition, w.error, w.staged.first_command_offset)
        else:
            why = "another writer's record lies between ours" if verdict is Verdict.OUT_OF_ORDER \
                else f"transaction aborted ({w.error})"
            rewind = w.staged.first_command_offset if verdict is Verdict.ABORTED else None
            if verdict is Verdict.ABORTED:
                partition.keep_results(w.staged)
            self._drop_commands(partition)
            self.lifecycle.resync(partition, why, rewind)

    def _observe(self, w: Written) -> None:
        for event, folded in zip(w.staged.events, w.staged.folds):
            self.metrics.observe(event, folded.status, folded.before, folded.after)

    def _requests(self, w: Written) -> list[RunRequest]:
        """The attempts whose JobStarted committed in ``w``."""
        now, number = time.time(), w.partition.number
        return [RunRequest(partition=number, epoch=event.epoch, job_id=job.job_id, tenant=job.tenant_id,
                           task_type=job.task_type, attempt=event.body.attempt, lane=Lane(job.lane),  # type: ignore[union-attr]
                           payload=job.payload, idempotency_key=job.idempotency_key,
                           deadline=now + self._timeout(job.task_type),
                           queued_at_us=job.queued_at or job.submitted_at)
                for event, job in w.staged.starts]

    def _timeout(self, task_type: str) -> float:
        try:
            return float(self.app.spec(task_type).timeout)
        except Exception:  # noqa: BLE001 - unknown types fail inside the executor with a clear error
            return 60.0

    # --- housekeeping and stopping -----------------------------------------------------------

    def _housekeeping(self) -> None:
        clock = time.monotonic()
        if clock >= self._next_tenants:
            self._next_tenants = clock + TENANTS_EVERY_S
            self.tenants.refresh()
        if clock >= self._next_metrics:
            self._next_metrics = clock + METRICS_EVERY_S
            self._sample_metrics()
        self.heartbeat.beat(self.partitions.values(), self.executor, self.options.lane_slots)

    def _sample_metrics(self) -> None:
        sampling.sample(self.metrics, self.partitions.values(), self.standbys)

    def _unknown_write(self, partition: int, event: m.Event) -> None:
        sampling.unknown_write(self.metrics, partition, event)

    def _owned_changed(self) -> None:
        self.metrics.rebalanced()
        self.heartbeat.soon()
        self.metrics.set_ownership({p.number: p.epoch for p in self.partitions.values() if p.deciding})

    def drain(self, grace_s: float) -> None:
        """Stop taking work; record in-flight results until every handler is done or ``grace_s`` passed."""
        log.info("engine %s shutting down (grace %.1fs)", self.owner_id, grace_s)
        self.lifecycle.revoke(list(self.partitions), grace_s)
        deadline = time.monotonic() + grace_s + 1.0
        while self.partitions and time.monotonic() < deadline:
            self.tick(taking=False)

    def shutdown(self) -> None:
        """Close what is still held, leave the group, stop every thread."""
        for w in self._writing:
            finish(w)  # never close a store under a transaction still being committed
        self._writing.clear()
        self.lifecycle.close_all()
        if self.standbys is not None:
            self.standbys.close()
            self.standbys.consumer.close()
        self.reader.stop()
        self.lifecycle.events.close()
        self.tenants.close()
        self.metrics.close()
        self.executor.shutdown(0)
        self.writer.close()
        self.heartbeat.close()

