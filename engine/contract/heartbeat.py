"""The heartbeat record engines publish about themselves on the compacted ``<ns>.workers`` topic.

One small JSON record keyed by the instance id: its owned partitions with epoch and phase, its
slots per lane, the jobs running now. A remote worker (docs/workers.md) publishes the same record with
its ``pool`` and its attempts' fencing tokens (``jobs``): the owners read it to renew those leases.
The writer (``engine.runtime.loop.heartbeat``) and the
reader (``engine.questions.workers``) share this format and nothing else. Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

LOST_AFTER = 3
"""Heartbeat intervals without a record after which an instance is shown as lost."""
FORMAT = 1


@dataclass(frozen=True)
class PartitionRow:
    """One partition an instance holds: the epoch of its claim and the phase it is in."""

    partition: int
    epoch: int
    phase: str
    owner: str


@dataclass(frozen=True)
class LaneSlots:
    """One lane's handler slots in an instance: busy and idle."""

    lane: str
    used: int
    free: int


@dataclass(frozen=True)
class LeasedJob:
    """One attempt a remote worker runs: its fencing token (what its heartbeat renews), its latest progress."""

    job_id: str
    token: int
    progress: float | None = None
    message: str = ""


@dataclass(frozen=True)
class WorkerRow:
    """One engine instance as its newest heartbeat describes it."""

    instance: str
    host: str
    pid: int
    started_at_us: int
    seen_at_us: int
    partitions: list[PartitionRow]
    slots: list[LaneSlots]
    running: list[str]  # job ids
    interval_s: float = 5.0
    lost: bool = field(default=False)  # no heartbeat for LOST_AFTER intervals: the process is gone or stuck
    task_types: list[str] | None = None  # the task types its app has handlers for; None: an engine that predates them
    pool: str | None = None  # a remote worker's pool (docs/workers.md); None: an engine
    jobs: list[LeasedJob] = field(default_factory=list)  # a remote worker's attempts, each renewed by this beat
    pools: dict[str, str] = field(default_factory=dict)  # an engine's task types that remote pools run: type -> pool


def encode_heartbeat(row: WorkerRow) -> bytes:
    """The record an engine publishes about itself."""
    return json.dumps({
        "format": FORMAT, "instance": row.instance, "host": row.host, "pid": row.pid,
        "started_at_us": row.started_at_us, "seen_at_us": row.seen_at_us, "interval_s": row.interval_s,
        "partitions": [[p.partition, p.epoch, p.phase, p.owner] for p in row.partitions],
        "slots": [[s.lane, s.used, s.free] for s in row.slots], "running": row.running,
        **({"task_types": row.task_types} if row.task_types is not None else {}),
        **({"pool": row.pool, "jobs": [[j.job_id, j.token, j.progress, j.message] for j in row.jobs]}
           if row.pool is not None else {}),
        **({"pools": row.pools} if row.pools else {}),
    }, separators=(",", ":"), sort_keys=True).encode()


def decode_heartbeat(raw: bytes, now_us: int) -> WorkerRow | None:
    """A heartbeat record as a row (``lost`` worked out against ``now_us``); None for one not understood."""
    try:
        d: dict[str, Any] = json.loads(raw)
        interval = float(d["interval_s"])
        row = WorkerRow(str(d["instance"]), str(d["host"]), int(d["pid"]), int(d["started_at_us"]),
                        int(d["seen_at_us"]), [PartitionRow(int(p), int(e), str(ph), str(o))
                                               for p, e, ph, o in d["partitions"]],
                        [LaneSlots(str(ln), int(u), int(f)) for ln, u, f in d["slots"]],
                        [str(j) for j in d["running"]], interval,
                        task_types=[str(t) for t in d["task_types"]] if "task_types" in d else None,
                        pool=str(d["pool"]) if d.get("pool") is not None else None,
                        jobs=[LeasedJob(str(j), int(t), None if p is None else float(p), str(msg))
                              for j, t, p, msg in d.get("jobs", [])],
                        pools={str(t): str(p) for t, p in d.get("pools", {}).items()})
    except (ValueError, KeyError, TypeError):
        return None
    lost = now_us - row.seen_at_us > LOST_AFTER * interval * 1_000_000
    return WorkerRow(**{**row.__dict__, "lost": lost})
