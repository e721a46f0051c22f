"""When an owner checkpoints its write model, and the transaction that carries it (``engine.runtime.checkpoints``).

A partition is due when more events were folded into its store since its last checkpoint
than ``max(min_events, keys in the store)``: the cost of a checkpoint (a pass over the
store) stays proportional to the events it saves a new owner from replaying. It is cut in
the loop, from a RocksDB snapshot of the committed store (nothing of the partition is
pending then: no transaction under way, nothing staged), and written on a commit thread
as the partition's next transaction, like its events: the partition decides nothing more
until it has ended, a few tens of ms. A graceful hand-back writes one at once
(:func:`on_close`) when at least ``close_min`` events were folded since the last.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from engine.config import Settings
from engine.runtime import checkpoints
from engine.runtime.kafka.ports import Transaction
from engine.runtime.loop.partition import Partition, State
from engine.runtime.loop.write import Writer
from engine.runtime.loop.written import Written
from engine.runtime.topics import checkpoints_topic

log = logging.getLogger("epochq.checkpoints")

MIN_EVENTS = 50_000
CLOSE_MIN_EVENTS = 1_000


class Checkpointer:
    """The checkpoints of the partitions one engine instance owns."""

    def __init__(self, settings: Settings, writer: Writer, enabled: bool, min_events: int = MIN_EVENTS,
                 close_min: int = CLOSE_MIN_EVENTS):
        self.settings, self.writer, self.enabled = settings, writer, enabled
        self.topic = checkpoints_topic(settings)
        self.min_events, self.close_min = min_events, close_min

    def due(self, partition: Partition) -> bool:
        """Whether ``partition`` should checkpoint now (active, idle, enough folded since its last one)."""
        n = partition.offsets.since_checkpoint
        if not self.enabled or partition.state is not State.ACTIVE or n < self.min_events:
            return False
        if partition.writing is not None or partition.draft.staged or partition.store is None:
            return False
        return n > partition.store.key_count()

    def launch(self, partition: Partition, wake: Callable[[], None]) -> Written:
        """Cut the partition's checkpoint and write it as its next transaction."""
        chunks, manifest = checkpoints.cut(partition.store, partition.epoch, partition.owner_id,  # type: ignore[arg-type]
                                           time.time_ns() // 1000)
        log.info("partition %d: checkpoint at events offset %d (%d keys, %d chunks, %d events since the last)",
                 partition.number, manifest.events_offset, manifest.keys, manifest.chunks,
                 partition.offsets.since_checkpoint)
        transaction: Transaction = partition.producer  # type: ignore[assignment]  # an active partition has one
        written = self.writer.launch_call(partition, wake, checkpoints.produce, transaction, self.topic,
                                          partition.number, chunks, manifest)
        written.checkpoint = manifest.events_offset  # the partition's newest once it commits (loop/apply.py)
        return written

    def on_close(self, partition: Partition) -> None:
        """A partition handed back gracefully: checkpoint it now, if it folded enough since its last one."""
        if not self.enabled or partition.offsets.since_checkpoint < self.close_min or partition.epoch <= 0 \
                or partition.store is None or partition.producer is None or partition.state is not State.REVOKING:
            return
        try:
            manifest = checkpoints.write_now(self.settings, partition.store, partition.producer,
                                             partition.number, partition.epoch, partition.owner_id)
        except Exception as e:  # noqa: BLE001 - the next owner replays a little more: never a reason to fail
            log.warning("partition %d: no checkpoint at hand-back (%s)", partition.number, e)
            return
        partition.stands(partition.offsets.checkpointed(manifest.events_offset))  # committed: write_now waited
        log.info("partition %d: checkpoint at hand-back, events offset %d", partition.number, manifest.events_offset)
