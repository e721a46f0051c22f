"""What happened in the last minutes, from the log: outcomes and start lateness per task type.

The console's overview asks this every few seconds, so it reads only the window: each events
partition from the first offset at or after ``since`` (Kafka's time index, by the records'
timestamps) to its end. A job's task type comes from the state directory's store when it has
the job (an engine's, or a standby's), else from a ``JobSubmitted`` inside the window, else
it is ``unknown``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.errors import DecodeError
from engine.runtime import kafka
from engine.runtime.kafka import scan_partition
from engine.runtime.read.joblog import with_fencing
from engine.runtime.read.lateness import open_store, task_type_of
from projections.query import partition_dirs

OUTCOMES = {m.JobSucceeded: "succeeded", m.JobFailed: "failed", m.JobDeadLettered: "dead"}
"""The events counted per task type, and the column each one counts in."""


@dataclass
class RecentActivity:
    """Per task type: outcomes counted and start lateness (µs) of the attempts started since ``since_us``."""

    since_us: int
    outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # task type -> succeeded/failed/dead -> n
    lateness: dict[str, array[int]] = field(default_factory=dict)  # task type -> lateness of each start (µs)

    def count(self, task_type: str, column: str) -> None:
        """One more ``column`` outcome for ``task_type``."""
        row = self.outcomes.setdefault(task_type, {"succeeded": 0, "failed": 0, "dead": 0})
        row[column] += 1

    def late(self, task_type: str, lateness_us: int) -> None:
        """One more start of ``task_type``, ``lateness_us`` after its due time."""
        self.lateness.setdefault(task_type, array("q")).append(lateness_us)

    def all_lateness(self) -> list[int]:
        """Every start's lateness, sorted (for figures over all task types)."""
        return sorted(v for values in self.lateness.values() for v in values)


def recent_activity(settings: Settings, since_us: int) -> RecentActivity:
    """Outcomes and lateness per task type of the events that occurred at or after ``since_us``."""
    consumer = kafka.events_reader(settings, "recent")
    topic, stores = settings.events_topic, dict(partition_dirs(settings))
    activity = RecentActivity(since_us)
    try:
        count = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        for p, start in first_offsets(consumer, topic, range(count), since_us).items():
            _fold_window(activity, _window(consumer, topic, p, start), stores.get(p))
    finally:
        consumer.close()
    return activity


def first_offsets(consumer: Consumer, topic: str, partitions: range, since_us: int) -> dict[int, int]:
    """Per partition, the first offset whose record was written at or after ``since_us`` (the end if none)."""
    asked = [TopicPartition(topic, p, since_us // 1000) for p in partitions]
    found = kafka.call(consumer.offsets_for_times, asked, 10)
    ends = kafka.end_offsets(consumer, topic, partitions)
    return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found}


def _window(consumer: Consumer, topic: str, p: int, start: int) -> Iterator[m.Event]:
    """The events of the window that count: a zombie's late writes are fenced, as the fold fences them."""
    for logged in with_fencing(_decoded(consumer, topic, p, start), None, mid_log=start > 0):
        if not logged.fenced:
            yield logged.event


def _decoded(consumer: Consumer, topic: str, p: int, start: int) -> Iterator[tuple[int, m.Event]]:
    for offset, _key, value in scan_partition(consumer, topic, p, start):
        try:
            yield offset, decode_event_at(value, topic, p, offset)
        except DecodeError:
            continue


def _fold_window(activity: RecentActivity, events: Iterator[m.Event], store_dir: Path | None) -> None:
    store = open_store(store_dir)
    kinds: dict[str, str] = {}
    try:
        for event in events:
            body, job_id = event.body, event.job_id or ""
            if isinstance(body, m.JobSubmitted):
                kinds[job_id] = body.task_type
            elif event.occurred_at < activity.since_us:
                continue
            elif isinstance(body, m.JobStarted):
                activity.late(task_type_of(job_id, kinds, store), max(0, event.occurred_at - body.due_at))
            elif type(body) in OUTCOMES:
                activity.count(task_type_of(job_id, kinds, store), OUTCOMES[type(body)])
    finally:
        if store is not None:
            store.close()
