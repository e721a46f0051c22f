"""``<ns>.schemas``: every writer schema used on the namespace's topics, in the log itself.

One compacted partition. Key: the writer schema's CRC-64-AVRO fingerprint as 16 lowercase hex
digits in wire order (bytes 2–9 of every record written with it); value: the schema's JSON
text; headers ``subject`` (``command``, ``event``, ``tenant``) and ``version``. Any reader in
any language resolves a record's writer schema here (docs/consuming.md), so a reader built with
an old schema keeps reading a log whose writers moved on.

- **Engines publish before they write, and repair.** An engine publishes every shipped schema
  when it starts, and ``epochq topics ensure`` does too (both create the topic in a namespace
  made before it existed); a shipped key whose value in the log is not the shipped text (a
  poisoned entry: the key of v5 with two fields swapped) is written again, so the newest value
  of the key is right again. Under ACLs only engines (and admins) may write the topic
  (``engine.runtime.acls``); the client and the tenants writer try to publish the schema they
  write with, once per process and namespace, and a principal refused WRITE goes on when the
  engines registered that schema already. Otherwise the refusal is one AccessDeniedError.
- **A schema counts only under its own fingerprint.** Anyone with WRITE could put any text
  under any key; a reader keeps, per key, the newest entry whose text has that fingerprint
  (:func:`fingerprint_of`) and ignores the others. ``epochq schemas list`` flags an entry whose
  text does not have its key's fingerprint, or differs from the shipped copy (:func:`schema_rows`).
- **epochq's readers resolve through it:** :func:`read_through` installs a :class:`LogSchemas`
  as a schema source of the codec (:mod:`engine.contract.learned`), which reads the topic only
  for a fingerprint the codec does not ship.

This module builds its own small clients (it sits below :mod:`engine.runtime.kafka`, which
installs the source for every reader it builds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from engine.config import Settings
from engine.contract import codec, learned
from engine.contract.versions import LEARNED, load_version
from engine.errors import AccessDeniedError, EpochqError, KafkaUnavailableError, TopicMismatchError

SCHEMAS_CONFIG = {"cleanup.policy": "compact"}
TIMEOUT_S = 10.0
REREAD_S = 1.0
"""A source reads the topic again for a fingerprint it lacks at most this often (garbage records
with random fingerprints do not turn into a read each)."""
MISSING_AFTER_MS = 3000
"""A schemas topic absent from the metadata this long is missing (a namespace made before it existed)."""
_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
           KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION}
_MISSING = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT,
              KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError.OFFSET_NOT_AVAILABLE}
log = logging.getLogger("epochq.schemas")


@dataclass(frozen=True, slots=True)
class Registered:
    """One record of ``<ns>.schemas``: a writer schema by fingerprint."""

    key: str
    subject: str
    version: int
    text: str

    def genuine(self) -> bool:
        """Whether the text really has the fingerprint of the key (anything else under it is forged or garbled)."""
        return fingerprint_of(self.text) == self.key


def fingerprint_of(text: str) -> str | None:
    """The key a schema text belongs under: its CRC-64-AVRO fingerprint (of its Parsing Canonical Form) as 16
    lowercase hex digits in wire order; None for a text that is no schema."""
    try:
        return load_version("?", LEARNED, text).fingerprint.hex()
    except Exception:  # noqa: BLE001 - any text can be in the log: one that is no schema has no fingerprint
        return None


def shipped() -> list[Registered]:
    """Every shipped version of every subject, as the records that register them."""
    return [Registered(v.fingerprint.hex(), subject, v.version, v.text)
            for subject in codec.SUBJECTS for v in codec.catalog(subject).versions]


def current(subject: str) -> Registered:
    """The record registering the version ``subject`` is written with."""
    v = codec.catalog(subject).current
    return Registered(v.fingerprint.hex(), subject, v.version, v.text)


# --- reading --------------------------------------------------------------------------------------


def read_schemas(settings: Settings, timeout_s: float = TIMEOUT_S, *, genuine: bool = False) -> dict[str, Registered]:
    """Every schema in ``<ns>.schemas`` by key, the newest entry of each (none if the topic does not exist).

    ``genuine``: keep, per key, the newest entry whose text has the key's fingerprint, ignoring the
    others (what a reader resolves with); otherwise the newest entry whatever it holds (what
    ``schemas list`` shows and the engine's repair compares)."""
    consumer = Consumer({**settings.kafka_config(), "group.id": f"{settings.namespace}.reader.schemas",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "auto.offset.reset": "earliest"})
    try:
        return _read(consumer, settings.schemas_topic, timeout_s, genuine)
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, timeout_s: float, genuine: bool = False) -> dict[str, Registered]:
    deadline = time.monotonic() + timeout_s
    bounds = _bounds(consumer, topic, deadline)
    found: dict[str, Registered] = {}
    if bounds is None or bounds[1] <= bounds[0]:
        return found
    low, high = bounds
    consumer.assign([TopicPartition(topic, 0, low)])
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() in _DENIED:
                raise _error(err, f"cannot read {topic}")
            continue
        _keep(found, msg.key(), msg.value(), _headers(msg.headers()), genuine)
        if (msg.offset() or 0) >= high - 1:
            return found
    raise KafkaUnavailableError(f"cannot read {topic} to its end in {timeout_s:.0f} s")


def _bounds(consumer: Consumer, topic: str, deadline: float) -> tuple[int, int] | None:
    """The topic's low and high offsets; None if it does not exist. A leader just elected is waited for."""
    while True:
        try:
            wait = max(0.1, deadline - time.monotonic())
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=wait)
            return int(low), int(high)
        except KafkaException as e:
            code = e.args[0].code()
            if code in _MISSING:
                return None
            if code not in _TRANSIENT or time.monotonic() >= deadline:
                raise _error(e.args[0], f"cannot read {topic}") from e
            time.sleep(0.1)


def _headers(raw: object) -> dict[str, bytes]:
    pairs = raw.items() if isinstance(raw, dict) else (raw or ())
    return {str(k): v if isinstance(v, bytes) else str(v or "").encode() for k, v in pairs}  # type: ignore[attr-defined]


def _keep(found: dict[str, Registered], key: bytes | None, value: bytes | None, headers: dict[str, bytes],
          genuine: bool = False) -> None:
    if key is None:
        return
    name = key.decode(errors="replace")
    if value is None:
        found.pop(name, None)  # a tombstone
        return
    subject = (headers.get("subject") or b"").decode(errors="replace")
    version = (headers.get("version") or b"").decode(errors="replace")
    entry = Registered(name, subject, int(version) if version.isdigit() else -1, value.decode(errors="replace"))
    if genuine and not entry.genuine():
        log.warning("the schema under key %s of <ns>.schemas does not have that fingerprint (it has %s): ignored, "
                    "a forged or garbled entry (`epochq schemas list` flags it; an engine's start repairs a shipped "
                    "key)", name, fingerprint_of(entry.text) or "none: it is no schema")
        return
    found[name] = entry


class LogSchemas:
    """A schema source of the codec reading ``<ns>.schemas``: whole, on a fingerprint it lacks."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._known: dict[str, str] = {}
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def __call__(self, fingerprint: bytes) -> str | None:
        """The schema text with this fingerprint, or None (never raises: the codec reports the unknown)."""
        key = fingerprint.hex()
        with self._lock:
            if key not in self._known and time.monotonic() - self._read_at >= REREAD_S:
                self._read_at = time.monotonic()
                try:
                    self._known = {k: r.text for k, r in read_schemas(self.settings, genuine=True).items()}
                except (EpochqError, KafkaException) as e:  # the codec then reports the fingerprint as unknown
                    log.warning("cannot look up schema %s in %s: %s", key, self.settings.schemas_topic, e)
            return self._known.get(key)


_sources: dict[tuple[str, str], LogSchemas] = {}
_published: set[tuple[str, ...]] = set()
"""(bootstrap, namespace, principal, key) of the schemas this process knows are registered."""
_lock = threading.Lock()


def read_through(settings: Settings) -> None:
    """Let the codec resolve fingerprints it does not ship through this namespace's ``<ns>.schemas``."""
    where = (settings.require_bootstrap(), settings.namespace)
    with _lock:
        if where not in _sources:
            _sources[where] = LogSchemas(settings)
            learned.add_source(_sources[where])


def stop_reading_through() -> None:
    """Uninstall every source :func:`read_through` installed (a process done with its namespaces: a test)."""
    with _lock:
        for source in _sources.values():
            learned.remove_source(source)
        _sources.clear()


# --- writing --------------------------------------------------------------------------------------


def publish(settings: Settings, entries: Iterable[Registered], timeout_s: float = TIMEOUT_S) -> int:
    """Write ``entries`` to ``<ns>.schemas`` and wait for the brokers to have them; how many."""
    entries = list(entries)
    if not entries:
        return 0
    topic = settings.schemas_topic
    producer = Producer({**settings.kafka_config(), "acks": "all", "allow.auto.create.topics": False,
                         "topic.metadata.propagation.max.ms": MISSING_AFTER_MS})
    errors: list[KafkaError] = []

    def failed(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    names = ", ".join(sorted({f"{e.subject} v{e.version}" for e in entries}))
    try:
        for entry in entries:
            producer.produce(topic, key=entry.key.encode(), value=entry.text.encode(), on_delivery=failed,
                             headers=[("subject", entry.subject.encode()), ("version", str(entry.version).encode())])
        left = producer.flush(timeout_s)
    except KafkaException as e:
        raise _error(e.args[0], f"cannot register the schemas ({names}) in {topic}") from e
    if errors:
        raise _error(errors[0], f"cannot register the schemas ({names}) in {topic}")
    if left:
        raise KafkaUnavailableError(f"cannot register the schemas ({names}) in {topic}: "
                                    f"{left} not acknowledged in {timeout_s:.0f} s")
    return len(entries)


def publish_shipped(settings: Settings) -> int:
    """Write every shipped schema ``<ns>.schemas`` lacks or holds wrong (the topic must exist); how many were
    written. A key whose newest value is not the shipped entry (text, subject, version) is repaired, with a
    WARNING: only a forged or garbled write puts one there."""
    have = read_schemas(settings)
    wrong = to_repair(shipped(), have)
    for entry in wrong:
        if entry.key in have:
            log.warning("%s held a wrong entry under the key of %s v%d (%s): registered the shipped schema again",
                        settings.schemas_topic, entry.subject, entry.version, entry.key)
    written = publish(settings, wrong)
    _mark(settings, shipped())
    return written


def to_repair(ships: Iterable[Registered], logged: dict[str, Registered]) -> list[Registered]:
    """The shipped entries ``logged`` (the newest entry per key) lacks, or holds anything else under. Pure."""
    return [e for e in ships if logged.get(e.key) != e]


def ensure_published(settings: Settings, subject: str) -> None:
    """Make sure the schema ``subject`` is written with is in ``<ns>.schemas`` (once per process).

    A principal refused WRITE (only engines may write it under ACLs) goes on if the schema is registered
    already, genuine (an engine of this version registered it); otherwise the refusal is raised."""
    entry = current(subject)
    if (*_who(settings), entry.key) in _published:
        return
    try:
        publish(settings, [entry])
    except AccessDeniedError as refused:
        if read_schemas(settings, genuine=True).get(entry.key) != entry:
            raise AccessDeniedError(f"{refused}; {subject} v{entry.version} is not registered there yet: start an "
                                    "engine of this version, or run `epochq topics ensure` as an admin") from refused
    _mark(settings, [entry])


def _mark(settings: Settings, entries: Iterable[Registered]) -> None:
    with _lock:
        _published.update((*_who(settings), e.key) for e in entries)


def _who(settings: Settings) -> tuple[str, str, str]:
    """Where and as whom: a principal refused WRITE is refused even if another one registered the schema."""
    return settings.require_bootstrap(), settings.namespace, f"{settings.sasl_username}|{settings.ssl_cert_file}"


def _error(err: KafkaError, what: str) -> EpochqError:
    if err.code() in _DENIED:
        return AccessDeniedError(f"{what}: {err.str()}: only engines (and admins) may write it; every role may "
                                 "read it (`epochq acl apply` grants both)")
    if err.code() in _MISSING:
        return TopicMismatchError(f"{what}: the topic is missing: run `epochq topics ensure` "
                                  "(or start an engine of this version once)")
    return KafkaUnavailableError(f"{what}: {err.name()}: {err.str()}")


# --- listing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchemaRow:
    """One line of ``epochq schemas list``: a schema and where it appears."""

    fingerprint: str
    subject: str
    version: int
    shipped: bool
    in_log: bool
    problem: str = ""  # what is wrong with the log's entry ("" when nothing is)


NOT_ITS_FINGERPRINT = "its text does not have this fingerprint"
NOT_SHIPPED_COPY = "differs from the shipped copy"


def schema_rows(ships: Iterable[Registered], logged: dict[str, Registered]) -> list[SchemaRow]:
    """Every schema shipped with this release or registered in the log (its newest entry per key), by subject and
    version, each log entry checked: its text must have its key's fingerprint, and be the shipped entry for a
    shipped key."""
    by_key = {e.key: e for e in ships}
    rows = [SchemaRow(k, e.subject, e.version, True, k in logged, _problem(logged.get(k), e))
            for k, e in by_key.items()]
    rows += [SchemaRow(k, e.subject or "?", e.version, False, True, _problem(e, None))
             for k, e in logged.items() if k not in by_key]
    return sorted(rows, key=lambda r: (r.subject, r.version, r.fingerprint))


def _problem(logged: Registered | None, shipped_as: Registered | None) -> str:
    if logged is None:
        return ""
    if not logged.genuine():
        return NOT_ITS_FINGERPRINT
    return NOT_SHIPPED_COPY if shipped_as is not None and logged != shipped_as else ""
