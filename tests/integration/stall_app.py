"""The corrupting engine of ``corrupt_app``, whose commands consumer refuses its first seeks, as librdkafka
does for a partition whose fetcher is between states (during a leader move, for one)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from engine.runtime.loop.inbox import CommandReader
from tests.integration.corrupt_app import app

__all__ = ["app"]

REFUSALS = 3


class RefusingSeeks:
    """The real consumer, but ``seek`` fails ``REFUSALS`` times first."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.refused = 0

    def seek(self, partition: TopicPartition) -> None:
        if self.refused < REFUSALS:
            self.refused += 1
            raise KafkaException(KafkaError(KafkaError._STATE, "injected: the fetcher is between states"))
        self._consumer.seek(partition)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


_real_init = CommandReader.__init__


def _init(self: CommandReader, consumer: Any, *args: Any, **kwargs: Any) -> None:
    _real_init(self, RefusingSeeks(consumer), *args, **kwargs)  # type: ignore[arg-type]


CommandReader.__init__ = _init  # type: ignore[method-assign]
