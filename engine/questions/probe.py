"""Whether the log answers at all, and a read's Kafka error as the epochq error it means.

A page that reads the log asks first, at most every few seconds, whether the cluster answers
(one metadata request of a kept reader); when it does not, the page skips its log reads
instead of waiting for each reader's own timeout. ``asked`` runs any read and turns a
librdkafka error into the typed error (engine.errors) a caller shows in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from engine.config import Settings
from engine.runtime import kafka
from engine.runtime.kafka.ports import TopicReader, topic_reader

T = TypeVar("T")


def asked(read: Callable[[], T]) -> T:
    """``read()``'s answer; a Kafka error comes out as the epochq error it means (RetryableError, …)."""
    return cast(T, kafka.call(read))


class EventsProbe:
    """A reader of the events topic kept to ask whether the cluster answers (made on first use)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._reader: TopicReader | None = None

    def ask(self, timeout: float) -> None:
        """Return when the cluster lists the events topic's partitions within ``timeout`` s; else an epochq error."""
        if self._reader is None:
            self._reader = topic_reader(self.settings, "console")
        self._reader.partitions(self.settings.events_topic, "read", timeout)

    def close(self) -> None:
        """Release the Kafka client."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
