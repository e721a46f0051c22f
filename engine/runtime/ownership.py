"""Taking, holding and giving back partitions: restore, claim, read back, revoke, fence.

Taking partition p: initialise p's transactional producer (this fences any zombie),
catch the store up to the end of events p, write ``OwnershipClaimed(last epoch + 1)``,
and decide nothing until that claim is read back.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_INVALID, KafkaException, Producer, TopicPartition

from engine.contract import messages as m
from engine.contract.codec import decode_event_at, encode_command, encode_event
from engine.contract.partitioner import partition_for
from engine.domain.decide import Emit
from engine.domain.lanes import RUNNABLE_LANES
from engine.errors import DecodeError
from engine.runtime import kafka
from engine.runtime.owner import Outbox, PartitionOwner, Phase, now_us
from projections.batch import Batch
from projections.store import open_store, store_path

if TYPE_CHECKING:
    from engine.runtime.loop import Engine

log = logging.getLogger("epochq.ownership")


class Ownership:
    """The partitions one engine instance owns, and their way in and out."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.owners: dict[int, PartitionOwner] = {}
        self.assigned: list[int] = []
        self._partitions: list[int] | None = None

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        return self.engine.settings

    def partition_count_cache(self) -> list[int]:
        """The partitions of the events topic (read once)."""
        if self._partitions is None:
            meta = self.engine.reader.list_topics(self.settings.events_topic, timeout=10)
            self._partitions = sorted(meta.topics[self.settings.events_topic].partitions)
        return self._partitions

    # --- rebalance callbacks (run inside consume) ----------------------------------------

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Take the partitions, paused until their claims are read back."""
        self.engine.metrics.rebalanced()
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        self.assigned.extend(tp.partition for tp in partitions)
        log.info("assigned partitions %s", [tp.partition for tp in partitions])

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Give partitions back: finish in-flight work within the grace period, commit, close."""
        self.engine.metrics.rebalanced()
        ps = [tp.partition for tp in partitions]
        self.assigned = [p for p in self.assigned if p not in ps]  # revoked before they were set up
        log.info("revoking partitions %s", ps)
        self.drain(ps, self.engine.options.grace_s)
        for p in ps:
            self.close(p)

    def on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """The group took the partitions away: drop their state at once, write nothing more."""
        self.engine.metrics.rebalanced()
        lost = {tp.partition for tp in partitions}
        self.assigned = [p for p in self.assigned if p not in lost]
        for p in lost:
            self.drop(p, "lost")

    # --- taking ----------------------------------------------------------------------------

    def set_up_assigned(self) -> None:
        """Open stores and producers for newly assigned partitions and start restoring them."""
        while self.assigned:
            p = self.assigned.pop(0)
            if p not in self.owners:
                self._set_up(p)

    def _set_up(self, p: int) -> None:
        store = open_store(store_path(self.settings.state_dir, self.settings.namespace, p))
        producer = kafka.owner_producer(self.settings, p)
        owner = PartitionOwner(p, self.engine.owner_id, store, producer)
        topic = self.settings.events_topic
        owner.restore_target = kafka.end_offsets(self.engine.reader, topic, [p])[p]
        self.engine.reader.incremental_assign([TopicPartition(topic, p, store.applied_offset() + 1)])
        self.owners[p] = owner
        log.info("partition %d: restoring from offset %d to %d", p, store.applied_offset() + 1, owner.restore_target)

    def advance(self) -> None:
        """Move restoring owners to claiming once caught up; resynced ones back to active."""
        for owner in list(self.owners.values()):
            if owner.phase in (Phase.RESTORING, Phase.RESYNC) and self._caught_up(owner):
                if owner.phase is Phase.RESYNC:
                    self._activate(owner)
                else:
                    self._claim(owner)
            elif owner.phase is Phase.ACTIVE and not owner.resumed:
                self._activate(owner)

    def _caught_up(self, owner: PartitionOwner) -> bool:
        if owner.store.applied_offset() + 1 >= owner.restore_target:
            return True
        tp = TopicPartition(self.settings.events_topic, owner.partition)
        position = self.engine.reader.position([tp])[0].offset
        return position != OFFSET_INVALID and position >= owner.restore_target

    def _claim(self, owner: PartitionOwner) -> None:
        owner.epoch = owner.last_epoch() + 1
        event = owner.stage(Emit(None, None, m.OwnershipClaimed(owner.partition, owner.owner_id)), now_us())
        owner.claim_event_id = event.event_id
        owner.phase = Phase.CLAIMING
        log.info("partition %d: claiming epoch %d as %s", owner.partition, owner.epoch, owner.owner_id)

    def _activate(self, owner: PartitionOwner) -> None:
        owner.phase = Phase.ACTIVE
        owner.resumed = True
        for record in owner.load_policy_state([lane.value for lane in RUNNABLE_LANES]):
            self.engine.work.resume_breaker(record)
        self.engine.work.requeue_orphans(owner)
        self.engine.work.timers.activate(owner)
        tp = TopicPartition(self.settings.commands_topic, owner.partition)
        self.engine.commands.resume([tp])
        log.info("partition %d: active at epoch %d", owner.partition, owner.epoch)

    # --- reading back ----------------------------------------------------------------------

    def read_back(self, max_messages: int = 5000) -> int:
        """Fold the events written to owned partitions; returns how many were read."""
        messages = self.engine.reader.consume(max_messages, 0)
        batches: dict[int, Batch] = {}
        for msg in messages:
            if msg.error():
                continue
            owner = self.owners.get(msg.partition())
            if owner is None:
                continue
            batch = batches.setdefault(owner.partition, Batch(owner.store))
            self._fold_one(owner, batch, msg)
        for batch in batches.values():
            batch.commit()
        return len(messages)

    def _fold_one(self, owner: PartitionOwner, batch: Batch, msg: Any) -> None:
        topic, p, offset, raw = msg.topic(), msg.partition(), msg.offset(), msg.value()
        event = owner.read_back_event(raw)
        if event is None:
            try:
                event = decode_event_at(raw, topic, p, offset)
            except DecodeError as e:
                log.error("skipping undecodable event: %s", e)
                batch.last_offset = offset
                return
        folded = owner.fold(batch, event, offset)
        self.engine.work.observe(owner, event, folded)

    # --- writing ---------------------------------------------------------------------------

    def produce(self, owner: PartitionOwner, event: m.Event) -> None:
        """Append one event to the owner's partition, waiting for queue space if needed."""
        key = event.job_id.encode() if event.job_id else None
        raw = encode_event(event)
        owner.wrote(raw, event)
        kafka.produce(owner.producer, self.settings.events_topic, raw, key, owner.partition)

    def send(self, producer: Producer, command: m.Command) -> None:
        """Produce a command to its job's partition of ``<ns>.commands``, inside the open transaction."""
        partition = partition_for(command.job_id, len(self.partition_count_cache()))
        kafka.produce(producer, self.settings.commands_topic, encode_command(command), command.job_id.encode(),
                      partition)

    def resync(self, owner: PartitionOwner, box: Outbox) -> None:
        """After an aborted transaction: forget the overlay, rewind commands, catch up again."""
        owner.forget_pending()
        owner.phase = Phase.RESYNC
        owner.restore_target = kafka.end_offsets(self.engine.reader, self.settings.events_topic, [owner.partition])[owner.partition]
        if box.first_command_offset is not None:
            tp = TopicPartition(self.settings.commands_topic, owner.partition, box.first_command_offset)
            self.engine.commands.seek(tp)

    # --- giving back -----------------------------------------------------------------------

    def drain(self, partitions: list[int], grace_s: float) -> None:
        """Stop taking work for ``partitions``; record in-flight results until done or grace ends."""
        owners = [self.owners[p] for p in partitions if p in self.owners]
        for owner in owners:
            owner.revoking = True
        deadline = time.monotonic() + grace_s
        while any(self.engine.executor.in_flight(o.partition) for o in owners) and time.monotonic() < deadline:
            self.engine.work.on_results(self.engine.executor.wait_results(0.05))
            self.engine.flush()
            self.read_back()
        self.engine.flush()

    def drain_all(self, grace_s: float) -> None:
        """Drain every owned partition (graceful shutdown)."""
        self.engine.commands.pause([TopicPartition(self.settings.commands_topic, p) for p in self.owners])
        self.drain(list(self.owners), grace_s)

    def close(self, p: int) -> None:
        """Release partition p after a clean hand-over."""
        owner = self.owners.pop(p, None)
        if owner is None:
            return
        self.engine.reader.incremental_unassign([TopicPartition(self.settings.events_topic, p)])
        try:
            owner.producer.flush(5)
        except KafkaException as e:  # fenced meanwhile: nothing of ours is pending anyway
            log.warning("partition %d: producer flush at hand-back failed: %s", p, e)
        owner.store.close()
        log.info("partition %d: handed back at epoch %d", p, owner.epoch)

    def drop(self, p: int, why: str) -> None:
        """Forget partition p at once (lost or fenced): no more writes, ever, from this owner."""
        owner = self.owners.pop(p, None)
        if owner is None:
            return
        owner.forget_pending()
        try:
            self.engine.reader.incremental_unassign([TopicPartition(self.settings.events_topic, p)])
        except Exception:  # noqa: BLE001 - the reader may already have lost it
            pass
        owner.store.close()
        log.warning("partition %d: dropped (%s) at epoch %d", p, why, owner.epoch)

    def close_all(self) -> None:
        """Close whatever is still open at process exit."""
        for p in list(self.owners):
            self.close(p)
