"""Who runs what: the engine instances' heartbeats on the compacted ``<ns>.workers`` topic, read whole.

Each engine publishes one small JSON record under its instance id every few seconds (its owned
partitions with epoch and phase, its slots per lane, the jobs running now) and a tombstone when
it stops cleanly (``engine.runtime.loop.heartbeat``). A record not renewed for LOST_AFTER
intervals belongs to an instance that died without saying so: it is shown as lost.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
import time
from dataclasses import dataclass, field
from typing import Any

from engine.config import Settings
from engine.runtime import kafka
from engine.runtime.topics import workers_topic

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


def encode_heartbeat(row: WorkerRow) -> bytes:
    """The record an engine publishes about itself."""
    return json.dumps({
        "format": FORMAT, "instance": row.instance, "host": row.host, "pid": row.pid,
        "started_at_us": row.started_at_us, "seen_at_us": row.seen_at_us, "interval_s": row.interval_s,
        "partitions": [[p.partition, p.epoch, p.phase, p.owner] for p in row.partitions],
        "slots": [[s.lane, s.used, s.free] for s in row.slots], "running": row.running,
        **({"task_types": row.task_types} if row.task_types is not None else {}),
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
                        task_types=[str(t) for t in d["task_types"]] if "task_types" in d else None)
    except (ValueError, KeyError, TypeError):
        return None
    lost = now_us - row.seen_at_us > LOST_AFTER * interval * 1_000_000
    return WorkerRow(**{**row.__dict__, "lost": lost})


def latest(records: Sequence[tuple[bytes | None, bytes | None]], now_us: int) -> list[WorkerRow]:
    """The newest row per instance from (key, value) records in log order; a tombstone removes it. Pure."""
    newest: dict[bytes, bytes] = {}
    for key, value in records:
        if key is None:
            continue
        if value is None:
            newest.pop(key, None)
        else:
            newest[key] = value
    rows = [row for raw in newest.values() if (row := decode_heartbeat(raw, now_us)) is not None]
    return sorted(rows, key=lambda r: (r.lost, r.instance))


def announced_task_types(rows: Sequence[WorkerRow]) -> set[str] | None:
    """The task types the running (not lost) instances have handlers for; None when one of them does not say
    (it predates the announcement), so nothing can be refused on that ground. Pure."""
    live = [row for row in rows if not row.lost]
    if any(row.task_types is None for row in live):
        return None
    return {t for row in live for t in row.task_types or ()}


def list_workers(settings: Settings) -> list[WorkerRow]:
    """Every engine instance that has published a heartbeat and not stopped cleanly since."""
    topic = workers_topic(settings)
    reader = kafka.events_reader(settings, "workers")
    try:
        records = [(key, value) for p in kafka.topic_partitions(reader, topic, "read")
                   for _, key, value in kafka.scan_partition(reader, topic, p)]
    finally:
        reader.close()
    return latest(records, int(time.time() * 1_000_000))
