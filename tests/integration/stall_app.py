"""The corrupting engine of ``corrupt_app``, whose commands source refuses its first seeks, as librdkafka
does for a partition whose fetcher is between states (during a leader move, for one): the port's translated error."""

from __future__ import annotations

from typing import Any

from engine.errors import KafkaUnavailableError
from engine.runtime.loop.inbox import CommandReader
from tests.integration.corrupt_app import app

__all__ = ["app"]

REFUSALS = 3


class RefusingSeeks:
    """The real commands source, but ``seek`` fails ``REFUSALS`` times first."""

    def __init__(self, source: Any) -> None:
        self._source = source
        self.refused = 0

    def seek(self, *args: Any) -> None:
        if self.refused < REFUSALS:
            self.refused += 1
            raise KafkaUnavailableError("cannot seek: Local: Erroneous state (injected: the fetcher is between states)")
        self._source.seek(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


_real_init = CommandReader.__init__


def _init(self: CommandReader, source: Any, *args: Any, **kwargs: Any) -> None:
    _real_init(self, RefusingSeeks(source), *args, **kwargs)  # type: ignore[arg-type]


CommandReader.__init__ = _init  # type: ignore[method-assign]
