"""The tunables of one engine instance, with defaults that serve short and long jobs alike."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.domain.lanes import Lane
from engine.domain.timerouter import Windows

DEFAULT_SLOTS = {Lane.HIGH: 32, Lane.NORMAL: 100, Lane.LOW: 16, Lane.BATCH: 4}
"""Handlers each lane runs at once. A slot is free again the moment its handler returns, and
the engine wakes for it at once, so a slot serves one short job per transaction round trip
(a few ms): 100 NORMAL slots keep up with thousands of no-op jobs a second, and the same
100 hold long, blocking jobs without starving the other lanes. An async handler's slot is a
task on the event loop; a sync handler's is a thread (created on demand)."""


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
    cancel_grace_s: float = 10.0  # how long an attempt asked to stop may run on before it is given up
    session_timeout_ms: int = 6000
    windows: Windows = field(default_factory=Windows)  # the time router's horizon and sweep intervals
    idle_s: float = 0.05  # the longest the loop sleeps with nothing to do (timers wake it sooner)
    standby: bool = False  # keep warm copies of the partitions this instance does not own (loop/standby.py)
    bulk_restore_min: int = 100_000  # a store lacking this many events restores in a process of its own; 0: never
    checkpoint_min_events: int = 50_000  # checkpoint a write model after this many events at least; 0: never
    execute: bool = True  # False (--no-execute): decide only; every task type goes to a remote pool (docs/workers.md)
