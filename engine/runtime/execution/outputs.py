"""The records a handler asks to produce (``ctx.produce``), checked before they are staged.

A record is kept with its attempt and written only in the partition transaction that records
the attempt's ``JobSucceeded`` (``engine.runtime.loop.effects``). What can be checked before
that transaction is checked here, in the handler's own thread, so that a record the brokers
would refuse fails its attempt instead of aborting the partition's transaction for every job
in it: the record's size (``MAX_OUTPUT_BYTES``), the topic's name, that it is no topic of the
engine's namespace nor one of Kafka's internal topics (:func:`refuse_reserved`, whatever the ACLs
say: the engine's principal may write ``<ns>.events``, and a handler that forwards a caller's topic
must not become a way to forge the engine's records), and, through a :class:`TopicGate`, that the
topic exists and the engine may WRITE it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine.contract.headers import TRACEPARENT
from engine.errors import OutputRefusedError, ValidationError

MAX_OUTPUT_BYTES = 1_000_000 - 16 * 1024
"""The largest record ``ctx.produce`` takes (value, key and headers): under the brokers' default
record limit, as the engine's own events. A topic set to a smaller ``max.message.bytes`` refuses a
record inside the transaction; see ``engine.runtime.loop.effects`` for what happens then."""
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
INTERNAL_PREFIX = "__"
"""Kafka's own topics (``__consumer_offsets``, ``__transaction_state``...) and those of tools on it start so."""

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One record a handler produced: written with its attempt's ``JobSucceeded``, or never."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    headers: Headers | None = None

    def size(self) -> int:
        """Bytes of value, key and headers: what counts against ``MAX_OUTPUT_BYTES``."""
        extra = sum(len(k) + len(v or b"") for k, v in self.headers or ())
        return len(self.value or b"") + len(self.key or b"") + extra


class TopicGate(Protocol):
    """Whether the engine may write a topic now; raises ``OutputRefusedError`` naming why not."""

    def check(self, record: OutputRecord) -> None:
        """Return if ``record``'s topic exists, is writable and takes it; raise ``OutputRefusedError`` otherwise."""


def output_record(topic: str, value: bytes | str | None, key: bytes | str | None,
                  headers: Mapping[str, bytes | str | None] | Headers | None) -> OutputRecord:
    """The record ``ctx.produce`` was given, as bytes, checked for its name and size."""
    if not isinstance(topic, str) or not TOPIC_NAME.match(topic) or topic in (".", ".."):
        raise OutputRefusedError(f"ctx.produce: topic {topic!r} is not a Kafka topic name")
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    record = OutputRecord(topic, _bytes(value, "value"), _bytes(key, "key"),
                          tuple((str(k), _bytes(v, f"header {k}")) for k, v in pairs) if headers else None)
    if (size := record.size()) > MAX_OUTPUT_BYTES:
        raise ValidationError(f"ctx.produce: the record for {topic} is {size} bytes; at most {MAX_OUTPUT_BYTES} "
                              "fit in one Kafka record", "value", "output_too_large")
    return record


def reserved_refusal(namespace: str, topic: str) -> str | None:
    """Why ``ctx.produce`` may never write ``topic``, or None: the source of truth for the topics kept from handlers.

    Every topic of the engine's namespace (``<ns>.events``, ``.commands``, ``.checkpoints``, ``.workers``,
    ``.schemas``, ``.tenants`` and any other ``<ns>.`` topic) and every internal topic (``__``), whatever
    the ACLs say. Pure: asked before any question to the brokers."""
    if topic.startswith(f"{namespace}."):
        return (f"ctx.produce: topic {topic} is a topic of namespace {namespace}: only the engine writes it, "
                "never a handler's record (docs/handlers.md, \"Effects exactly once\")")
    if topic.startswith(INTERNAL_PREFIX):
        return f"ctx.produce: topic {topic} is an internal topic (its name starts with __): a handler never writes it"
    return None


def refuse_reserved(namespace: str, topic: str) -> None:
    """Raise ``ValidationError`` (reason ``reserved_topic``: dead-lettered at once) if ``topic`` is kept from
    handlers (:func:`reserved_refusal`)."""
    if (why := reserved_refusal(namespace, topic)) is not None:
        raise ValidationError(why, "topic", "reserved_topic")


def traced_headers(headers: Mapping[str, bytes | str | None] | Headers | None,
                   traceparent: str) -> Headers:
    """``headers`` with a ``traceparent`` header added, unless they have one already."""
    given = headers.items() if isinstance(headers, Mapping) else (headers or ())
    pairs = [(str(k), _bytes(v, f"header {k}")) for k, v in given]
    if any(name == TRACEPARENT for name, _ in pairs):
        return pairs
    return [*pairs, (TRACEPARENT, traceparent.encode())]


def _bytes(value: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise ValidationError(f"ctx.produce: {what} must be bytes, str or None, got {type(value).__name__}", what)
