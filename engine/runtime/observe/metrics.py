"""Prometheus metrics of one engine instance, derived only from what the fold applied.

Every job counter moves when this instance folds an event from the log, so a metric means
what the log says: ``epochq_jobs_succeeded_total`` counts ``JobSucceeded`` events the fold
applied, not handler returns. Events folded while restoring a partition (``live=False``)
were already counted by the instance that owned it then, so they move no counter.
Depths come from the projection stores, sampled by the engine (:meth:`EngineMetrics.set_depths`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from engine.contract import messages as m
from engine.domain.jobs import JobView
from engine.runtime.observe.gctuning import PauseWatch
from projections.evolve import APPLIED, FENCED
from engine.errors import ConfigError, IllegalStateError

__all__ = ["EngineMetrics", "LATENESS_BUCKETS", "PROCESSING_BUCKETS", "NO_LANE"]

log = logging.getLogger("epochq.metrics")

LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
PROCESSING_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                      300.0, 900.0)
NO_LANE = "none"
UNKNOWN = "unknown"
JOB_LABELS = ("task_type", "lane")
REFUSABLE = frozenset(m.COMMAND_BODIES)
"""The command names a CommandRefused may carry as a label (anything else: ``unknown``)."""
REFUSAL_CODES = frozenset({"stale_token", "unauthenticated", "unauthorized", "tenant"})
"""The reason codes counted apart (the text before the first ':'); any other: ``other``."""
TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
POISON_STEPS = ("decide", "result", "timer", "dispatch", "schedule", "requeue")


@dataclass(frozen=True, slots=True)
class _Series:
    """The label children of one (task_type, lane): looked up once, then reused."""

    submitted: Counter
    started: Counter
    succeeded: Counter
    failed: Counter
    retried: Counter
    dead_lettered: Counter
    processing: Histogram
    lateness: Histogram


class EngineMetrics:
    """The metrics of one engine instance, in a registry of their own."""

    def __init__(self, threshold_dead_letters: int = 100, registry: CollectorRegistry | None = None):
        if threshold_dead_letters < 0:
            raise ConfigError(f"threshold_dead_letters: expected >= 0 (0: no alert), got {threshold_dead_letters}")
        self.threshold = threshold_dead_letters
        self.registry = registry if registry is not None else CollectorRegistry()
        self._define_job_metrics()
        self._define_state_metrics()
        self._series: dict[tuple[str, str], _Series] = {}
        self._rejected: dict[tuple[str, str], Counter] = {}
        self._lanes: set[str] = set()
        self._owned: set[int] = set()
        self._alerting = False
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._on: dict[type, Callable[[m.Event, JobView | None], None]] = {
            m.JobSubmitted: self._submitted, m.JobStarted: self._started, m.JobSucceeded: self._succeeded,
            m.JobFailed: self._failed, m.JobRetryScheduled: self._retried,
            m.JobDeadLettered: self._dead_lettered, m.JobRejected: self._rejected_one,
            m.CommandQuarantined: self._quarantined, m.JobRequeued: self._requeued,
            m.CommandRefused: self._refused,
        }

    def _define_job_metrics(self) -> None:
        r, per_job = self.registry, JOB_LABELS
        self.submitted = Counter("epochq_jobs_submitted_total", "JobSubmitted events applied", per_job, registry=r)
        self.started = Counter("epochq_jobs_started_total", "JobStarted events applied (attempts started)",
                               per_job, registry=r)
        self.succeeded = Counter("epochq_jobs_succeeded_total", "JobSucceeded events applied", per_job, registry=r)
        self.failed = Counter("epochq_jobs_failed_total", "JobFailed events applied (failed attempts)",
                              per_job, registry=r)
        self.retried = Counter("epochq_jobs_retried_total", "JobRetryScheduled events applied", per_job, registry=r)
        self.dead_lettered = Counter("epochq_jobs_dead_lettered_total", "JobDeadLettered events applied",
                                     per_job, registry=r)
        self.rejected = Counter("epochq_jobs_rejected_total", "JobRejected events applied, by reason",
                                ("task_type", "lane", "reason"), registry=r)
        self.quarantined = Counter("epochq_commands_quarantined_total", "CommandQuarantined events applied",
                                   registry=r)
        self.requeued = Counter("epochq_jobs_requeued_total", "JobRequeued events applied: attempts given up and "
                                "run again, not counted toward max_attempts, by reason", ("task_type", "reason"),
                                registry=r)
        self.processing = Histogram("epochq_job_processing_seconds", "Handler run time of finished attempts",
                                    ("task_type",), buckets=PROCESSING_BUCKETS, registry=r)
        self.lateness = Histogram("epochq_job_lateness_seconds", "JobStarted time minus the time the job was due",
                                  ("task_type",), buckets=LATENESS_BUCKETS, registry=r)

    def _define_state_metrics(self) -> None:
        r = self.registry
        self.queue_depth = Gauge("epochq_queue_depth", "Jobs in the ready queue of a lane (owned partitions)",
                                 ("lane",), registry=r)
        self.dead_letter_depth = Gauge("epochq_dead_letter_depth", "Jobs in the dead-letter queue (owned partitions)",
                                       registry=r)
        self.dead_letter_alert = Gauge("epochq_dead_letter_alert", "1 while dead-letter depth >= the alert threshold",
                                       registry=r)
        self.partitions_owned = Gauge("epochq_partitions_owned", "Job partitions this instance owns", registry=r)
        self.partition_epoch = Gauge("epochq_partition_epoch", "The epoch this instance owns a partition under",
                                     ("partition",), registry=r)
        self.restoring = Gauge("epochq_partitions_restoring", "Assigned partitions whose store is being restored "
                               "from the log before this instance claims them", registry=r)
        self.standbys = Gauge("epochq_standby_partitions", "Partitions this instance keeps a warm standby copy of "
                              "(engine run --standby)", registry=r)
        self.fenced_writes = Counter("epochq_fenced_writes_total",
                                     "Events the fold marked fenced, plus producer fencings", registry=r)
        self.unknown_writes = Counter("epochq_unknown_writes_total", "Records a restore found not counting: claims "
                                      "that are not the successor of the valid one, events outside the valid "
                                      "claim's epoch (forged, or a zombie's)", ("kind",), registry=r)
        for kind in ("claim", "event"):  # present at 0 from the start: an alert rule sees the first one
            self.unknown_writes.labels(kind)
        self.producer_resets = Counter("epochq_producer_resets_total", "Producers that failed for good without a "
                                       "fence: each partition is set up again with a new one while the group still "
                                       "assigns it here", registry=r)
        self.rebalances = Counter("epochq_rebalances_total", "Partition assignments and revocations seen", registry=r)
        self.tick_seconds = Histogram("epochq_tick_seconds", "Time one loop tick spends in a step: decide (commands, "
                                      "results, timers, dispatch), write (the transactions), apply (store commits)",
                                      ("step",), registry=r, buckets=TICK_BUCKETS)
        self._tick_steps = tuple(self.tick_seconds.labels(step) for step in ("decide", "write", "apply"))
        self.poison = Counter("epochq_poison_total", "Inputs set aside because a step raised on them (each also "
                              "recorded as an event: JobRejected, JobDeadLettered or CommandQuarantined)",
                              ("step",), registry=r)
        for step in POISON_STEPS:
            self.poison.labels(step)
        self.timers_hot = Gauge("epochq_timers_hot", "Timers held in memory (the time router's hot set), per "
                                "owned partition and kind (job, schedule)", ("partition", "kind"), registry=r)
        self.timers_overdue = Counter("epochq_timers_overdue_fired_total",
                                      "Jobs fired by the overdue sweep rather than from memory (after a "
                                      "takeover, a clock jump or a lost timer)", registry=r)
        self.gc_pause = Histogram("epochq_gc_pause_seconds", "Pauses of the engine process's garbage collector, "
                                  "by generation (2: a full collection)", ["generation"], registry=r,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))
        self.rocksdb_memory = Gauge("epochq_rocksdb_memory_bytes", "RocksDB memory of this process, by kind: "
                                    "block_cache (the shared cache, memtables charged to it: bounded), memtables, "
                                    "table_readers (outside the cache)", ("kind",), registry=r)
        self.pool_slots = Gauge("epochq_pool_slots", "Slots of a remote pool's live workers, as their heartbeats "
                                "announce them (docs/workers.md)", ("pool",), registry=r)
        self.pool_in_flight = Gauge("epochq_pool_in_flight", "Attempts this instance has out with a remote pool's "
                                    "workers (leased)", ("pool",), registry=r)
        self.pool_queued = Gauge("epochq_pool_queued", "Jobs queued in this instance's partitions whose task type "
                                 "goes to a remote pool (sampled)", ("pool",), registry=r)
        self.pool_lease_expiries = Counter("epochq_pool_lease_expiries_total", "Remote attempts whose lease lapsed "
                                           "(recorded as failed: lease_expired)", ("pool",), registry=r)
        self._expiries_seen: dict[str, int] = {}
        self.commands_refused = Counter("epochq_commands_refused_total", "CommandRefused events: commands an owner "
                                        "refused, by command and the reason's code (stale_token: a remote result "
                                        "without the running attempt's token)", ("command", "reason"), registry=r)
        self._gc_watch = PauseWatch(lambda generation, seconds: self.gc_pause.labels(str(generation)).observe(seconds))

    # --- events folded from the log --------------------------------------------------------

    def observe(self, event: m.Event, status: str, before: JobView | None, after: JobView | None,
                live: bool = True) -> None:
        """Count one folded event; ``live=False`` (restore, catch-up) moves no counter."""
        if not live:
            return
        if status == FENCED:
            self.fenced_writes.inc()
        elif status == APPLIED:
            on = self._on.get(type(event.body))
            if on is not None:
                on(event, after if after is not None else before)

    def _of(self, event: m.Event, job: JobView | None) -> _Series:
        key = (job.task_type, job.lane) if job is not None else (getattr(event.body, "task_type", UNKNOWN), NO_LANE)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._children(*key)
        return series

    def _children(self, task_type: str, lane: str) -> _Series:
        def of(counter: Counter) -> Counter:
            return counter.labels(task_type, lane)

        return _Series(of(self.submitted), of(self.started), of(self.succeeded), of(self.failed), of(self.retried),
                       of(self.dead_lettered), self.processing.labels(task_type), self.lateness.labels(task_type))

    def _submitted(self, event: m.Event, job: JobView | None) -> None:
        self._of(event, job).submitted.inc()

    def _started(self, event: m.Event, job: JobView | None) -> None:
        series, body = self._of(event, job), event.body
        assert isinstance(body, m.JobStarted)
        series.started.inc()
        series.lateness.observe(max(0, event.occurred_at - body.due_at) / 1e6)

    def _succeeded(self, event: m.Event, job: JobView | None) -> None:
        series, body = self._of(event, job), event.body
        assert isinstance(body, m.JobSucceeded)
        series.succeeded.inc()
        series.processing.observe(max(0, body.duration_us) / 1e6)

    def _failed(self, event: m.Event, job: JobView | None) -> None:
        series, body = self._of(event, job), event.body
        assert isinstance(body, m.JobFailed)
        series.failed.inc()
        series.processing.observe(max(0, body.duration_us) / 1e6)

    def _retried(self, event: m.Event, job: JobView | None) -> None:
        self._of(event, job).retried.inc()

    def _dead_lettered(self, event: m.Event, job: JobView | None) -> None:
        self._of(event, job).dead_lettered.inc()

    def _rejected_one(self, event: m.Event, job: JobView | None) -> None:
        body = event.body
        assert isinstance(body, m.JobRejected)
        # an unknown task type is whatever a producer wrote: keep it out of the label set (admission checks the
        # task type first, so other reasons name a registered one; wrong_partition is decided before admission)
        unchecked = body.reason in ("unknown_task_type", "wrong_partition")
        task_type = UNKNOWN if unchecked or not body.task_type else body.task_type
        key = (task_type, body.reason)
        child = self._rejected.get(key)
        if child is None:
            child = self._rejected[key] = self.rejected.labels(task_type, NO_LANE, body.reason)
        child.inc()

    def _requeued(self, event: m.Event, job: JobView | None) -> None:
        reason = getattr(event.body, "reason", "") or UNKNOWN  # a RequeueReason: bounded
        self.requeued.labels(job.task_type if job is not None else UNKNOWN, reason).inc()

    def _refused(self, event: m.Event, job: JobView | None) -> None:
        body = event.body
        assert isinstance(body, m.CommandRefused)
        command = body.command if body.command in REFUSABLE else UNKNOWN  # a name from the log: keep labels bounded
        code = body.reason.split(":", 1)[0].strip()
        self.commands_refused.labels(command, code if code in REFUSAL_CODES else "other").inc()

    def _quarantined(self, event: m.Event, job: JobView | None) -> None:
        self.quarantined.inc()

    # --- sampled state ---------------------------------------------------------------------

    def set_depths(self, queue_depth_by_lane: dict[str, int], dead_letters: int) -> None:
        """Record sampled depths; raise or clear the dead-letter alert when it crosses the threshold."""
        for lane in self._lanes - queue_depth_by_lane.keys():
            self.queue_depth.labels(lane).set(0)
        for lane, depth in queue_depth_by_lane.items():
            self.queue_depth.labels(lane).set(depth)
        self._lanes.update(queue_depth_by_lane)
        self.dead_letter_depth.set(dead_letters)
        self._alert(dead_letters)

    def _alert(self, dead_letters: int) -> None:
        firing = self.threshold > 0 and dead_letters >= self.threshold
        if firing == self._alerting:
            return
        self._alerting = firing
        self.dead_letter_alert.set(1 if firing else 0)
        if firing:
            log.warning("dead-letter queue holds %d jobs, at or above the alert threshold %d: "
                        "inspect with `epochq dlq list`, replay with `epochq dlq replay`",
                        dead_letters, self.threshold)
        else:
            log.info("dead-letter queue back to %d jobs, below the alert threshold %d", dead_letters, self.threshold)

    def set_ownership(self, epochs: dict[int, int]) -> None:
        """Record the partitions owned now (partition -> epoch); forget the others."""
        for partition in self._owned - epochs.keys():
            self.partition_epoch.remove(str(partition))
        for partition, epoch in epochs.items():
            self.partition_epoch.labels(str(partition)).set(epoch)
        self._owned = set(epochs)
        self.partitions_owned.set(len(epochs))

    def set_copies(self, restoring: int, standbys: int) -> None:
        """Record how many partitions are restoring and how many are followed as standbys."""
        self.restoring.set(restoring)
        self.standbys.set(standbys)

    def set_rocksdb_memory(self, by_kind: dict[str, int]) -> None:
        """Record RocksDB's memory by kind (projections.store.rocksdb_memory)."""
        for kind, size in by_kind.items():
            self.rocksdb_memory.labels(kind).set(size)

    def set_pools(self, pools: dict[str, tuple[int, int, int]]) -> None:
        """Per remote pool: (its live workers' slots, attempts out with them, lease expiries so far)."""
        for pool, (slots, in_flight, expiries) in pools.items():
            self.pool_slots.labels(pool).set(slots)
            self.pool_in_flight.labels(pool).set(in_flight)
            seen = self._expiries_seen.get(pool, 0)
            if expiries > seen:
                self.pool_lease_expiries.labels(pool).inc(expiries - seen)
            self._expiries_seen[pool] = expiries

    def set_pools_queued(self, queued: dict[str, int]) -> None:
        """Per remote pool, the jobs queued for it in this instance's partitions (sampled)."""
        for pool, count in queued.items():
            self.pool_queued.labels(pool).set(count)

    def set_timers(self, partition: int, held: tuple[int, int] | None) -> None:
        """Record the (job, schedule) timers a partition holds in memory; None: the partition is gone."""
        for kind, n in zip(("job", "schedule"), held or (None, None)):
            if n is not None:
                self.timers_hot.labels(str(partition), kind).set(n)
            else:
                try:
                    self.timers_hot.remove(str(partition), kind)
                except KeyError:
                    pass

    def tick(self, decide_s: float, write_s: float, apply_s: float) -> None:
        """Time one tick's steps."""
        decide, write, apply = self._tick_steps
        decide.observe(decide_s)
        write.observe(write_s)
        apply.observe(apply_s)

    def poisoned(self, step: str) -> None:
        """Count one input set aside at ``step`` (decide, result, timer, dispatch, schedule, requeue)."""
        self.poison.labels(step).inc()

    def rebalanced(self) -> None:
        """Count one rebalance callback (partitions assigned, revoked or lost)."""
        self.rebalances.inc()

    def producer_fenced(self) -> None:
        """Count one write the broker refused because a newer owner fenced our producer."""
        self.fenced_writes.inc()

    def producer_recreated(self) -> None:
        """Count one producer that failed for good, unfenced (its partition is set up again, if still assigned here)."""
        self.producer_resets.inc()

    # --- serving ---------------------------------------------------------------------------

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` of this registry over HTTP from a daemon thread (port 0: any free port)."""
        if self._server is not None:
            raise IllegalStateError(f"metrics already served on port {self.port}")
        self._server, self._thread = start_http_server(port, addr, registry=self.registry)

    @property
    def port(self) -> int | None:
        """The port ``/metrics`` is served on, or None before :meth:`serve`."""
        return self._server.server_port if self._server is not None else None

    def watch_gc(self) -> None:
        """Time the process's garbage collections into ``epochq_gc_pause_seconds`` (until :meth:`close`)."""
        self._gc_watch.install()

    def close(self) -> None:
        """Stop serving (if serving) and release the port."""
        self._gc_watch.remove()
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(5)
