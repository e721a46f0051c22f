"""One partition's transaction as a value: what it carried, and how it ended (the write step's output, the apply
step's input). Kept apart from the writer so the steps that read it import no Kafka client (engine.testing)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Partition


@dataclass(slots=True)
class Written:
    """One partition's transaction: under way, then committed (with its events' offsets) or failed."""

    partition: Partition
    staged: Staged
    error: Exception | None = None
    first: int | None = None  # offset of the first event
    last: int | None = None  # offset of the last event
    future: Future[None] | None = None  # the commit, on a commit thread
    refused: dict[tuple[str, int], str] = field(default_factory=dict)  # (job, attempt) -> why a record of it was
    checkpoint: int | None = None
    """A checkpoint's transaction: the events offset it was cut at, the partition's newest once it commits."""

    @property
    def done(self) -> bool:
        """Whether the transaction has ended (committed, or failed)."""
        return self.future is None or self.future.done()

    def delivered(self, index: int) -> Any:
        """The delivery callback of the event at ``index`` (first or last)."""
        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                if index == 0:
                    self.first = msg.offset()
                if index == len(self.staged.events) - 1:
                    self.last = msg.offset()
        return on_delivery
