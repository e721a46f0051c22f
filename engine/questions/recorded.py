"""Every event that counts, from every partition of the events topic: what ``epochq simulate`` replays."""

from __future__ import annotations

from collections.abc import Iterator

from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.errors import DecodeError
from engine.runtime.kafka.ports import topic_reader
from engine.questions.history import with_fencing


def recorded_events(settings: Settings) -> Iterator[m.Event]:
    """The events of the log up to its end as of now, partition by partition in log order; fenced writes
    (a zombie's) and undecodable records left out."""
    topic = settings.events_topic
    with topic_reader(settings, "simulate") as reader:
        for p in reader.partitions(topic):
            scan = reader.scan(topic, p)
            try:
                for logged in with_fencing(_decoded(scan, topic, p), None):
                    if not logged.fenced:
                        yield logged.event
            finally:
                scan.close()


def _decoded(records: Iterator[tuple[int, bytes | None, bytes]], topic: str, p: int) -> Iterator[tuple[int, m.Event]]:
    for offset, _key, value in records:
        try:
            yield offset, decode_event_at(value, topic, p, offset)
        except DecodeError:
            continue
