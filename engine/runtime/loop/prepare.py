"""Taking several partitions at once: their stores loaded from checkpoints and their producers initialised side by side.

An engine that takes six partitions with an empty state directory loads six checkpoints
(``engine.runtime.checkpoints.seed``) and initialises six transactional producers; each is
mostly waiting on the brokers, so they run in threads at once instead of one after another.
What fails is handed back to the lifecycle by partition, which tries that partition again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from engine.config import Settings
from engine.runtime import checkpoints
from engine.runtime.kafka.admin import log_identity
from engine.runtime.loop.partition import Partition
from engine.runtime.kafka.ports import EventLog, Transaction, owner_transaction

T = TypeVar("T")
THREADS = 8


def side_by_side(fn: Callable[[int], T], numbers: Iterable[int]) -> dict[int, T | Exception]:
    """``fn(p)`` for every ``p`` at once, in threads: each result, or the error it raised."""
    numbers = list(numbers)
    if not numbers:
        return {}

    def run(p: int) -> T | Exception:
        try:
            return fn(p)
        except Exception as e:  # noqa: BLE001 - handed back to the caller, by partition
            return e

    with ThreadPoolExecutor(min(THREADS, len(numbers)), thread_name_prefix="epochq-take") as pool:
        return dict(zip(numbers, pool.map(run, numbers)))


class Preparer:
    """Per assignment of a partition: its store checked against the log (``projections.identity``) and its
    checkpoint loaded once (if its store is empty), its producer made early."""

    def __init__(self, settings: Settings, holder: str, events: EventLog):
        self.settings, self.holder, self.events = settings, holder, events
        self.seeded: set[int] = set()
        self.producers: dict[int, Transaction] = {}
        self.identity: str | None = None  # of the events topic's log, asked once per instance

    def prepare(self, partitions: list[Partition], may_seed: Callable[[int], bool]) -> dict[int, Exception]:
        """Seed the stores not seeded yet, then make the producers not made yet; the errors, by partition."""
        by_number = {p.number: p for p in partitions}
        unseeded = [n for n in by_number if n not in self.seeded and may_seed(n)]
        errors: dict[int, Exception] = {}
        if unseeded:
            try:
                identity = self.log_identity()
                ends = self.events.end(unseeded)
            except Exception as e:  # noqa: BLE001 - a broker away: every one of them is tried again
                return {n: e for n in unseeded}
            seeded = side_by_side(lambda n: checkpoints.seed(self.settings, n, self.holder, ends[n], identity),
                                  unseeded)
            for n, loaded in seeded.items():
                if isinstance(loaded, Exception):
                    errors[n] = loaded
                    continue
                held = by_number[n]
                held.offsets = held.offsets.checkpointed(-1 if loaded is None else loaded)
                self.seeded.add(n)
        wanted = [n for n in by_number if n in self.seeded and n not in self.producers]
        for n, made in side_by_side(lambda n: owner_transaction(self.settings, n), wanted).items():
            if isinstance(made, Exception):
                errors[n] = made
            else:
                self.producers[n] = made
        return errors

    def log_identity(self) -> str:
        """The identity of the events topic's log (asked of the cluster the first time)."""
        if self.identity is None:
            self.identity = log_identity(self.settings, self.settings.events_topic)
        return self.identity

    def producer(self, p: int) -> Transaction:
        """The producer made for ``p`` (made now if none was)."""
        return self.producers.pop(p, None) or owner_transaction(self.settings, p)

    def forget(self, p: int) -> None:
        """``p`` is no longer held: a later assignment seeds and makes its producer again."""
        self.seeded.discard(p)
        self.producers.pop(p, None)
