"""What the owners know of the remote workers: each pool's live workers and slots, and the leases they renew.

A reader thread follows ``<ns>.workers`` (the compacted heartbeats topic every engine and worker
publishes to, ``engine.contract.heartbeat``) and keeps the newest row of each instance; the loop
asks it how many slots a pool has (:meth:`PoolDirectory.slots`) and takes the leases renewed since
it last asked (:meth:`PoolDirectory.take_renewals`). A heartbeat renews a lease only by the
attempt's fencing token; the owner's lease table decides the rest (``leases.py``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

from engine.clock import now_us
from engine.config import Settings
from engine.contract.heartbeat import LOST_AFTER, LeasedJob, WorkerRow, decode_heartbeat
from engine.runtime.kafka.ports import heartbeats_reader
from engine.runtime.topics import workers_topic

log = logging.getLogger("epochq.pools")
POLL_S = 0.2
BATCH = 500


@dataclass(frozen=True, slots=True)
class Renewal:
    """A heartbeat's word that a worker runs ``job``."""

    worker: str
    job: LeasedJob


class PoolDirectory:
    """The newest heartbeat of each remote worker, read on a thread of its own; and the renewals they bring."""

    def __init__(self, settings: Settings) -> None:
        self._reader = heartbeats_reader(settings, workers_topic(settings))
        self._lock = threading.Lock()
        self._rows: dict[str, WorkerRow] = {}
        self._renewals: list[Renewal] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epochq-pools", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        complained = False
        while not self._stop.is_set():
            try:
                records = self._reader.read_soon(BATCH, POLL_S)
            except Exception as e:  # noqa: BLE001 - a reader that fails says so once and tries again
                if not complained:
                    log.warning("reading the workers' heartbeats failed: %s", e)
                complained = True
                continue
            for record in records:
                self._take(record.key(), record.value())

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        instance = (key or b"").decode(errors="replace")
        row = decode_heartbeat(value, now_us()) if value is not None else None
        with self._lock:
            if row is None or row.pool is None:
                self._rows.pop(instance, None)  # a tombstone, an engine's row, or one not understood
                return
            self._rows[instance] = row
            self._renewals += [Renewal(instance, job) for job in row.jobs]

    def rows(self) -> list[WorkerRow]:
        """The remote workers, each as its newest heartbeat says (``lost`` worked out now)."""
        now = now_us()
        with self._lock:
            rows = list(self._rows.values())
        return [replace(r, lost=now - r.seen_at_us > LOST_AFTER * r.interval_s * 1_000_000) for r in rows]

    def slots(self, pool: str) -> int:
        """How many attempts the live workers of ``pool`` run at once (asked every tick: no rows copied)."""
        now = now_us()
        with self._lock:
            return sum(s.used + s.free for r in self._rows.values()
                       if r.pool == pool and now - r.seen_at_us <= LOST_AFTER * r.interval_s * 1_000_000
                       for s in r.slots)

    def take_renewals(self) -> list[Renewal]:
        """The attempts heartbeats named since the last take."""
        with self._lock:
            taken, self._renewals = self._renewals, []
        return taken

    def close(self) -> None:
        """Stop the reader."""
        self._stop.set()
        self._thread.join(2.0)
        self._reader.close()

