"""Which user topics the engine may write now, as the brokers say: the gate ``ctx.produce`` checks.

A topic of the engine's namespace, or an internal one, is refused first, without asking anyone
(``outputs.refuse_reserved``): the engine's principal may write ``<ns>.events``, a handler never.

A record staged for a topic that is missing or that the engine may not WRITE would fail inside
the partition's transaction and abort it for every job in it (a missing topic even holds the
commit until the transaction times out). So a handler's first record for a topic asks the
brokers once (``describe_topics`` with the authorized operations: it never creates a topic) and
the answer is kept for a while, a refusal for a shorter while (so a topic created or an ACL
granted is seen soon). The same question reads the topic's ``max.message.bytes``: a record
larger than that (uncompressed: what it compresses to is known only once its batch is built)
fails its attempt here.
"""

from __future__ import annotations

import threading
import time

from engine.config import Settings
from engine.errors import OutputRefusedError, ValidationError
from engine.runtime.execution.outputs import OutputRecord, refuse_reserved
from engine.runtime.kafka.admin import (
    AclOperation,
    AdminClient,
    ConfigResource,
    ResourceType,
    TopicCollection,
    admin_for,
)
from engine.runtime.kafka.errors import kafka_error

ALLOWED_FOR_S = 60.0
REFUSED_FOR_S = 2.0
TIMEOUT_S = 10.0
WRITE_OPERATIONS = (AclOperation.WRITE, AclOperation.ALL)
BATCH_OVERHEAD = 256
"""Bytes a record batch adds around one record (its header, the record's own framing, lz4's frame)."""
LZ4_GROWTH = 255
"""lz4 makes incompressible input larger by at most 1/255 of it: a record is checked at its worst case."""
DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
"""The brokers' default ``message.max.bytes``: the limit assumed when a topic's cannot be read."""


class KafkaTopicGate:
    """``check(record)``: its topic exists, this principal may WRITE it, and it takes a record that large."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._admin: AdminClient | None = None
        self._lock = threading.Lock()
        self._answers: dict[str, tuple[float, str | None, int]] = {}  # topic -> (until, refusal or None, limit)
        self._asking: set[str] = set()  # topics whose expired answer is being renewed in the background

    def check(self, record: OutputRecord) -> None:
        """Return if ``record`` may be written; ``OutputRefusedError`` (``ValidationError``: too large, or a topic of
        the namespace or an internal one) if not.

        Only a topic's first check waits for the brokers; an expired answer is still used while a
        background thread renews it, so a handler (an ``async def`` one on the event loop) rarely waits."""
        topic = record.topic
        refuse_reserved(self._settings.namespace, topic)  # whatever the ACLs say; before any broker question
        answer = self._answers.get(topic)
        if answer is None or (answer[1] is not None and answer[0] < time.monotonic()):
            answer = self._renew(topic)  # a refusal is asked again in the handler: the fix is seen at once
        elif answer[0] < time.monotonic():
            self._renew_later(topic)
        if answer[1] is not None:
            raise OutputRefusedError(answer[1])
        if (size := record.size()) + size // LZ4_GROWTH + BATCH_OVERHEAD > answer[2]:
            raise ValidationError(f"ctx.produce: the record for {topic} is {size} bytes; the topic takes "
                                  f"{answer[2]} bytes at most (its max.message.bytes, with the batch's own bytes "
                                  "and compression's worst case)", "value", "output_too_large")

    def _renew(self, topic: str) -> tuple[float, str | None, int]:
        refused, limit = self._ask(topic)
        answer = (time.monotonic() + (REFUSED_FOR_S if refused else ALLOWED_FOR_S), refused, limit)
        self._answers[topic] = answer
        return answer

    def _renew_later(self, topic: str) -> None:
        with self._lock:
            if topic in self._asking:
                return
            self._asking.add(topic)

        def renew() -> None:
            try:
                self._renew(topic)
            finally:
                with self._lock:
                    self._asking.discard(topic)
        threading.Thread(target=renew, name="epochq-output-gate", daemon=True).start()

    def _admin_client(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                self._admin = admin_for(self._settings)
            return self._admin

    def _ask(self, topic: str) -> tuple[str | None, int]:
        """(why the engine may not write ``topic``, or None; the largest record it takes)."""
        admin = self._admin_client()
        try:
            found = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                          request_timeout=TIMEOUT_S)
            description = found[topic].result()
        except Exception as e:  # noqa: BLE001 - a librdkafka error, or no answer: the handler is told in one line
            err = kafka_error(e)
            return refusal(topic, err.name() if err is not None else type(e).__name__,
                           err.str() if err is not None else str(e)), 0
        operations = description.authorized_operations
        if operations is not None and not any(op in operations for op in WRITE_OPERATIONS):
            return refusal(topic, "TOPIC_AUTHORIZATION_FAILED", ""), 0
        return None, self._limit(admin, topic)

    def _limit(self, admin: AdminClient, topic: str) -> int:
        """The topic's ``max.message.bytes``; the brokers' default when it cannot be read."""
        try:
            configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=TIMEOUT_S)
            entries = next(iter(configs.values())).result()
            return int(entries["max.message.bytes"].value)
        except Exception:  # noqa: BLE001 - DESCRIBE_CONFIGS not granted, or no answer: the default limit
            return DEFAULT_MAX_MESSAGE_BYTES


def refusal(topic: str, name: str, text: str) -> str:
    """What a handler is told when the brokers cannot describe ``topic`` (``name``: the Kafka error's)."""
    if name == "UNKNOWN_TOPIC_OR_PART":
        return f"ctx.produce: topic {topic} does not exist: create it first (`epochq topics` does not make it)"
    if name == "TOPIC_AUTHORIZATION_FAILED":
        return (f"ctx.produce: the engine may not WRITE topic {topic}: grant it with "
                f"`epochq acl apply --engine NAME --output-topic {topic}` (docs/security.md)")
    return f"ctx.produce: cannot check topic {topic} now ({name}: {text})"
