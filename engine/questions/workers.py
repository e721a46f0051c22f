"""Who runs what: the engine instances' heartbeats on the compacted ``<ns>.workers`` topic, read whole.

Each engine publishes one small JSON record under its instance id every few seconds (its owned
partitions with epoch and phase, its slots per lane, the jobs running now) and a tombstone when
it stops cleanly (``engine.runtime.loop.heartbeat`` writes them, in the format of
``engine.contract.heartbeat``). A record not renewed for LOST_AFTER intervals belongs to an
instance that died without saying so: it is shown as lost.
"""

from __future__ import annotations

import time
from collections.abc import Sequence


from engine.config import Settings
from engine.contract.heartbeat import WorkerRow, decode_heartbeat
from engine.runtime.kafka.ports import topic_reader
from engine.runtime.topics import workers_topic

__all__ = ["WorkerRow", "announced_task_types", "latest", "list_workers"]


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
    with topic_reader(settings, "workers") as reader:
        records = [(key, value) for p in reader.partitions(topic) for _, key, value in reader.scan(topic, p)]
    return latest(records, int(time.time() * 1_000_000))
