"""Faults injected at the Kafka edge, for tests that prove the engine recovers from them: nothing is armed unless a
test arms it.

A test's app module arms a fault when it is imported (``tests/integration/fatal_app.py``): the engine process
that loads the app then makes its owners' producers through :func:`producer`, which hands out the client's own
``Producer`` while nothing is armed, and a :class:`FaultyProducer` once a fault is. The fault fires in the
client call itself, as a ``KafkaException`` carrying the ``KafkaError`` librdkafka would raise, so every step
after it (the translation in :mod:`.errors`, the loop's recovery) runs as it would for the real error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer


@dataclass(slots=True)
class CommitFault:
    """One ``commit_transaction`` that raises ``error`` instead of committing, the first time ``when()`` says so.

    ``commit_first``: commit for real, then raise (the outcome the caller cannot know is a commit); otherwise
    the transaction is left open on the brokers, as a producer that died before its EndTxn leaves it: the
    producer is dead from then on (it aborts nothing, closing it does nothing), so only a new producer of its
    transactional id settles that transaction."""

    error: KafkaError
    when: Callable[[], bool]
    commit_first: bool = False
    fired: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fires(self) -> bool:
        """Whether this commit is the one that fails (each commit thread asks; one is told yes)."""
        with self.lock:
            if self.fired or not self.when():
                return False
            self.fired += 1
            return True


_armed: list[CommitFault] = []
_dead: list[Producer] = []
"""Producers a fault killed, kept from being destroyed: their transaction stays open as a dead client's does."""


def fail_commit_once(code: int, reason: str, when: Callable[[], bool], commit_first: bool = False) -> CommitFault:
    """Arm one fault: the first commit after ``when()`` holds raises a fatal ``KafkaError(code, reason)``."""
    fault = CommitFault(KafkaError(code, reason, fatal=True), when, commit_first)
    _armed.append(fault)
    return fault


class FaultyProducer(Producer):
    """The client's producer, with the armed faults firing in its calls."""

    def commit_transaction(self, *args: Any) -> None:
        """Commit, unless an armed fault fires here (then raise its error, after committing if it says so)."""
        fault = next((f for f in _armed if f.fires()), None)
        if fault is None:
            return super().commit_transaction(*args)
        if fault.commit_first:
            super().commit_transaction(*args)
        else:
            _dead.append(self)
        raise KafkaException(fault.error)

    def abort_transaction(self, *args: Any) -> None:
        """Abort, unless the producer is dead (then raise what a dead producer raises)."""
        if self in _dead:
            raise KafkaException(KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True))
        return super().abort_transaction(*args)

    def purge(self, *args: Any, **kwargs: Any) -> None:
        """Purge, unless the producer is dead."""
        if self not in _dead:
            super().purge(*args, **kwargs)

    def close(self, *args: Any) -> bool:
        """Close, unless the producer is dead (it stays as it is, its transaction open)."""
        return True if self in _dead else bool(super().close(*args))


def producer(config: dict[str, Any]) -> Producer:
    """A producer for ``config``: the client's own, or a :class:`FaultyProducer` when a test armed a fault."""
    return FaultyProducer(config) if _armed else Producer(config)
