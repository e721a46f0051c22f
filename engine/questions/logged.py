"""An event as a reader of the log sees it: its offset and the fold's verdict. No Kafka client needed."""

from __future__ import annotations

from dataclasses import dataclass

from engine.contract import messages as m


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with its place in the log and the fold's verdict on it."""

    offset: int
    event: m.Event
    fenced: bool = False
