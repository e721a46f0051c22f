"""The engine process: one loop that reads commands, decides, writes, reads back and acts.

Per tick: commands → decide → stage; executor results → decide → stage; due timers →
decide → stage; free slots → StartAttempt → stage; then one transaction per partition
(events + consumed command offsets); then read the events back and fold them; only
after a JobStarted is committed does its handler run.
"""

from __future__ import annotations

import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from dataclasses import dataclass, field, replace

from confluent_kafka import Consumer, TopicPartition

from engine.app import App
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_command_at
from engine.contract.partitioner import partition_for
from engine.domain.breaker import BreakerPolicy
from engine.domain.decide import CommandInput, DecideContext, Emit, Limits, TaskPolicy
from engine.domain.lanes import RUNNABLE_LANES, Lane, lane_for
from engine.domain.schedules import is_schedule_command
from engine.domain.timerouter import Windows
from engine.errors import DecodeError, FencedError, ValidationError
from engine.runtime import kafka
from engine.runtime.executor import Executor
from engine.runtime.owner import Phase, PartitionOwner
from engine.runtime.ownership import Ownership
from engine.runtime.metrics import EngineMetrics
from engine.runtime.tenants import TenantDirectory
from projections.views import keys as k
from projections.views.counters import read_int
from engine.runtime.work import Work

log = logging.getLogger("epochq.engine")

DEFAULT_SLOTS = {Lane.HIGH: 4, Lane.NORMAL: 8, Lane.LOW: 4, Lane.BATCH: 2}


@dataclass(frozen=True)
class EngineOptions:
    """Tunables of one engine instance."""

    lane_slots: dict[Lane, int] = field(default_factory=lambda: dict(DEFAULT_SLOTS))
    lane_limits: dict[Lane, int] = field(default_factory=dict)  # max queued jobs per lane (absent: none)
    fair: bool = True  # False: FIFO across tenants within a lane (for comparison only)
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    dlq_alert_threshold: int = 100
    grace_s: float = 10.0
    session_timeout_ms: int = 6000
    windows: Windows = field(default_factory=Windows)  # the time router's horizon and sweep intervals
    max_commands: int = 1000


class Engine:
    """One engine instance: a member of the group that owns job partitions."""

    def __init__(self, app: App, settings: Settings, options: EngineOptions | None = None,
                 owner_id: str | None = None):
        self.app = app
        self.settings = settings
        self.options = options or EngineOptions()
        self.owner_id = owner_id or settings.owner_id or kafka.default_owner_id()
        self.stopping = threading.Event()
        self.base_ctx = DecideContext(0, 0, settings.max_payload_bytes, _policies(app))
        self.executor = Executor(app, self.options.lane_slots)
        self.commands: Consumer = kafka.commands_consumer(settings, self.options.session_timeout_ms)
        self.reader: Consumer = kafka.events_reader(settings, self.owner_id)
        self._committer = ThreadPoolExecutor(max_workers=8, thread_name_prefix="epochq-commit")
        self.tenants = TenantDirectory(settings)
        self.metrics = EngineMetrics(self.options.dlq_alert_threshold)
        self._next_sample = 0.0
        self.ownership = Ownership(self)
        self.work = Work(self)

    @property
    def owners(self) -> dict[int, PartitionOwner]:
        """The partitions this instance owns (in any phase)."""
        return self.ownership.owners

    def breaker_policy(self, task_type: str) -> BreakerPolicy | None:
        """The circuit-breaker policy of a task type (None: no breaker)."""
        return self._breakers.get(task_type)

    @functools.cached_property
    def _breakers(self) -> dict[str, BreakerPolicy]:
        return {name: self.app.spec(name).breaker for name in self.app.task_types
                if self.app.spec(name).breaker is not None}  # type: ignore[misc]

    def run(self) -> None:
        """Run until ``stop()``; then hand partitions back gracefully."""
        self.commands.subscribe([self.settings.commands_topic], on_assign=self.ownership.on_assign,
                                on_revoke=self.ownership.on_revoke, on_lost=self.ownership.on_lost)
        if self.options.metrics_port is not None:
            self.metrics.serve(self.options.metrics_port, self.options.metrics_addr)
        self.metrics.watch_gc()
        log.info("engine %s started on %s", self.owner_id, self.settings.commands_topic)
        try:
            while not self.stopping.is_set():
                self.tick()
        finally:
            self.shutdown()

    def stop(self) -> None:
        """Ask the loop to stop taking work and shut down (safe from signal handlers)."""
        self.stopping.set()

    def tick(self, idle_timeout: float = 0.02) -> None:
        """One round of the loop."""
        busy = bool(self.executor.in_flight()) or any(o.outbox for o in self.owners.values())
        messages = self.commands.consume(self.options.max_commands, 0 if busy else idle_timeout)
        self.tenants.refresh()
        self.on_commands(messages)
        self.ownership.set_up_assigned()
        self.work.on_results(self.executor.poll_results())
        self.work.fire_timers()
        self.work.dispatch()
        self.flush()
        self.ownership.read_back()
        self.ownership.advance()
        self.sample_metrics()

    def sample_metrics(self) -> None:
        """Every 5 s: lane and dead-letter depths and the epochs of owned partitions."""
        if time.monotonic() < self._next_sample:
            return
        self._next_sample = time.monotonic() + 5.0
        owners = list(self.owners.values())
        depths = {lane.value: sum(read_int(o.store, k.lane_key(k.LANE_DEPTH, lane.value)) for o in owners)
                  for lane in RUNNABLE_LANES}
        self.metrics.set_depths(depths, sum(1 for o in owners for _ in o.store.scan(k.DEAD)))
        self.metrics.set_ownership({p: o.epoch for p, o in self.owners.items()})

    # --- commands ------------------------------------------------------------------------

    def on_commands(self, messages: list) -> None:
        """Decide every command of an ACTIVE partition; rewind the others."""
        rewound: set[int] = set()
        for msg in messages:
            if msg.error():
                log.warning("commands consumer: %s", msg.error())
                continue
            p = msg.partition()
            owner = self.owners.get(p)
            if owner is None or owner.phase is not Phase.ACTIVE or owner.revoking:
                if p not in rewound:
                    rewound.add(p)
                    self.commands.seek(TopicPartition(self.settings.commands_topic, p, msg.offset()))
                continue
            self.on_command(owner, msg.value(), msg.offset())

    def on_command(self, owner: PartitionOwner, raw: bytes, offset: int) -> None:
        """Decode and decide one command; an undecodable one is quarantined, not lost."""
        topic, p = self.settings.commands_topic, owner.partition
        ctx = owner.context(self.base_ctx)
        try:
            command = decode_command_at(raw, topic, p, offset)
        except DecodeError as e:
            log.warning("quarantined %s", e)
            body = m.CommandQuarantined(topic, p, offset, e.reason, raw or b"")
            owner.stage(Emit(None, None, body), ctx.now)
        else:
            self._decide_command(owner, command, offset, ctx)
        owner.consumed(offset)

    def _decide_command(self, owner: PartitionOwner, command: m.Command, offset: int, ctx: DecideContext) -> None:
        n = len(self.ownership.partition_count_cache())
        if partition_for(command.job_id, n) != owner.partition:
            detail = f"job {command.job_id} belongs to partition {partition_for(command.job_id, n)}, " \
                     f"not {owner.partition}: produce with Java-compatible murmur2 partitioning"
            task = command.body.task_type if isinstance(command.body, m.SubmitJob) else ""
            owner.stage(Emit(command.job_id, command.tenant_id, m.JobRejected(task, "wrong_partition", detail)),
                        ctx.now, command.command_id, command.correlation_id)
            return
        if is_schedule_command(command):  # its "job" is the schedule: engine/runtime/schedules.py
            self.work.timers.on_schedule_command(owner, command, offset, ctx)
            return
        if isinstance(command.body, m.SubmitJob):
            ctx = replace(ctx, limits=self._limits(owner, command), scope_tenants=self._scope(command.body.scope))
        owner.decide(command.job_id, CommandInput(command, offset), ctx, command.command_id, command.correlation_id)

    def _scope(self, scope: str | None) -> tuple[str, ...]:
        """The tenants a scoped job fans out to, from the tenants table as it is now (then recorded)."""
        if scope == "global":
            return tuple(sorted(self.tenants.all()))
        if scope and scope.startswith("product:"):
            return tuple(sorted(self.tenants.tenants_of_product(scope.split(":", 1)[1])))
        return ()

    def _limits(self, owner: PartitionOwner, command: m.Command) -> Limits:
        """Backpressure inputs for one SubmitJob: queue depths now, and the limits that apply."""
        body = command.body
        assert isinstance(body, m.SubmitJob)
        try:
            lane = lane_for(body.priority, body.lane, (self.base_ctx.tasks or {}).get(body.task_type, TaskPolicy()).lane)
        except (ValidationError, ValueError):
            return Limits()
        tenant_depth, lane_depth = owner.depth(lane.value, command.tenant_id)
        return Limits(tenant_depth, self.tenants.max_queued(command.tenant_id), lane_depth,
                      self.options.lane_limits.get(lane))

    # --- writing -------------------------------------------------------------------------

    def flush(self) -> None:
        """One transaction per partition with staged events, committed in parallel; then start handlers.

        Producing is CPU work done here in turn; ``send_offsets`` and ``commit`` wait on the
        brokers, so the partitions' transactions wait for them side by side.
        """
        boxes = [(owner, owner.take_outbox()) for owner in list(self.owners.values()) if owner.outbox]
        if not boxes:
            return
        group = self.commands.consumer_group_metadata()
        staged = [(owner, box, self._attempt(self._produce, owner, box)) for owner, box in boxes]
        ready = [(owner, box) for owner, box, error in staged if error is None]
        finishing = [self._committer.submit(self._attempt, self._commit, owner, box, group) for owner, box in ready]
        outcomes = [(owner, box, error) for owner, box, error in staged if error is not None]
        outcomes += [(owner, box, future.result()) for (owner, box), future in zip(ready, finishing)]
        for owner, box, error in outcomes:
            self._settle(owner, box, error)

    @staticmethod
    def _attempt(step, owner: PartitionOwner, box, *args) -> Exception | None:  # type: ignore[no-untyped-def]
        try:
            step(owner, box, *args)
        except (FencedError, kafka.TransactionAborted) as e:
            if isinstance(e, kafka.TransactionAborted):
                try:
                    kafka.call(owner.producer.abort_transaction, kafka.TXN_TIMEOUT_S)
                except (FencedError, kafka.TransactionAborted) as abort_error:
                    return abort_error
            return e
        return None

    def _produce(self, owner: PartitionOwner, box) -> None:  # type: ignore[no-untyped-def]
        producer = owner.producer
        kafka.call(producer.begin_transaction)
        for event in box.events:
            self.ownership.produce(owner, event)
        for command in box.commands:
            self.ownership.send(producer, command)

    def _commit(self, owner: PartitionOwner, box, group) -> None:  # type: ignore[no-untyped-def]
        producer = owner.producer
        if box.next_command_offset is not None:
            offsets = [TopicPartition(self.settings.commands_topic, owner.partition, box.next_command_offset)]
            kafka.call(producer.send_offsets_to_transaction, offsets, group, kafka.TXN_TIMEOUT_S)
        kafka.call(producer.commit_transaction, kafka.TXN_TIMEOUT_S)

    def _settle(self, owner: PartitionOwner, box, error: Exception | None) -> None:  # type: ignore[no-untyped-def]
        """After a partition's transaction: start its handlers, or resync, or give the partition up."""
        if isinstance(error, FencedError):
            self.metrics.producer_fenced()
            log.error("partition %d fenced at epoch %d: %s", owner.partition, owner.epoch, error)
            self.ownership.drop(owner.partition, "fenced")
        elif error is not None:
            log.warning("partition %d: transaction aborted (%s); resyncing", owner.partition, error)
            self.ownership.resync(owner, box)
        else:
            for event, job in box.starts:
                self.work.start(owner, event, job)

    # --- stopping ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop taking work, let in-flight jobs finish within the grace period, leave the group."""
        log.info("engine %s shutting down (grace %.1fs)", self.owner_id, self.options.grace_s)
        self.ownership.drain_all(self.options.grace_s)
        self.commands.close()
        self.ownership.close_all()
        self.reader.close()
        self.tenants.close()
        self.metrics.close()
        self.executor.shutdown(0)
        self._committer.shutdown(wait=False)


def _policies(app: App) -> dict[str, TaskPolicy]:
    return {
        name: TaskPolicy(spec.retry, spec.lane.value if spec.lane else None)
        for name in app.task_types
        for spec in [app.spec(name)]
    }
