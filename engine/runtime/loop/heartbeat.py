"""The engine's heartbeat: what this instance holds and runs, published to ``<ns>.workers`` every few seconds.

One small JSON record keyed by the instance id (format: ``engine.contract.heartbeat``; ``engine.questions.workers``
reads them), and a tombstone when the engine stops cleanly. Publishing never stops the engine: a missing
topic or a refused write is logged once and the engine goes on without a heartbeat.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping

from engine.clock import now_us
from engine.config import Settings
from engine.domain.lanes import Lane
from engine.runtime.execution.executor import Executor
from engine.runtime.kafka import plain
from engine.runtime.loop.partition import Partition
from engine.contract.heartbeat import LaneSlots, PartitionRow, WorkerRow, encode_heartbeat
from engine.runtime.topics import workers_topic

log = logging.getLogger("epochq.engine")

EVERY_S = 5.0
"""Seconds between heartbeats; ``epochq workers`` shows an instance silent for 3 of them as lost."""
MAX_RUNNING_LISTED = 1000
"""Running job ids a heartbeat lists at most (the count per lane is in its slots)."""


def snapshot(instance: str, started_at_us: int, partitions: Iterable[Partition], slots: Mapping[Lane, int],
             free: Mapping[Lane, int], running: list[str], at_us: int, interval_s: float = EVERY_S,
             task_types: Iterable[str] = (), pools: Mapping[str, str] | None = None) -> WorkerRow:
    """The heartbeat of an instance holding ``partitions`` with ``free`` slots of ``slots`` per lane, whose app
    has handlers for ``task_types``. Pure."""
    ordered = sorted(partitions, key=lambda p: p.number)
    held = [PartitionRow(p.number, p.epoch, p.state.value, instance) for p in ordered]
    lanes = [LaneSlots(lane.value, max(0, n - free.get(lane, 0)), free.get(lane, 0))
             for lane, n in slots.items() if n > 0]
    return WorkerRow(instance, socket.gethostname(), os.getpid(), started_at_us, at_us, held, lanes,
                     sorted(running)[:MAX_RUNNING_LISTED], interval_s, task_types=sorted(task_types),
                     pools=dict(pools or {}))


class Heartbeat:
    """Publishes this instance's heartbeats; made with the engine, closed (with a tombstone) when it stops."""

    def __init__(self, settings: Settings, instance: str, every_s: float = EVERY_S, task_types: Iterable[str] = (),
                 pools: Mapping[str, str] | None = None):
        self.instance, self.every_s, self.topic = instance, every_s, workers_topic(settings)
        self.task_types = sorted(task_types)
        self.pools = dict(pools or {})  # the task types remote pools run: what a waiter names (docs/workers.md)
        self.started_at_us = now_us()
        self._next = 0.0
        self._failed = False
        self._producer = plain.writer(settings, {"acks": "all", "linger.ms": 0, "message.timeout.ms": 10_000})

    def beat(self, partitions: Iterable[Partition], executor: Executor, lane_slots: Mapping[Lane, int]) -> None:
        """Publish what this instance holds and runs, if a heartbeat is due."""
        clock = time.monotonic()
        if clock < self._next:
            return
        self._next = clock + self.every_s
        held = list(partitions)
        running = [r.job_id for p in held for r in executor.in_flight_requests(p.number)]
        free = {lane: executor.free_slots(lane) for lane in lane_slots}
        self.publish(snapshot(self.instance, self.started_at_us, held, lane_slots, free, running, now_us(),
                              self.every_s, self.task_types, self.pools))

    def soon(self) -> None:
        """Publish at the next chance (what this instance holds changed)."""
        self._next = 0.0

    def publish(self, row: WorkerRow) -> None:
        """Send one heartbeat (asynchronously; a failure is logged once)."""
        self._send(encode_heartbeat(row))

    def close(self, flush_s: float = 5.0) -> None:
        """Say this instance stopped (a tombstone), and wait up to ``flush_s`` for it to be written."""
        self._send(None)
        self._producer.flush(flush_s)

    def _send(self, value: bytes | None) -> None:
        self._producer.send(self.topic, self.instance.encode(), value, self._reported)

    def _reported(self, failed: str | None) -> None:
        if failed is not None:
            self._complain(failed)
        else:
            self._failed = False

    def _complain(self, why: str) -> None:
        if not self._failed:
            log.warning("heartbeat to %s failed: %s (`epochq workers` will not show this instance; "
                        "`epochq topics ensure` creates the topic)", self.topic, why)
        self._failed = True
