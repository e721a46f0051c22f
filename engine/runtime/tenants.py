"""The tenants table: the compacted ``<ns>.tenants`` topic, read whole and then followed.

Every engine instance holds a :class:`TenantDirectory`: it reads the topic from the
beginning up to its end before answering (so weights and quotas are never guessed),
then follows it with a non-blocking :meth:`TenantDirectory.refresh`. A record keyed by
tenant id sets that tenant; a tombstone (no value) removes it. Writes go through
:func:`set_tenant` and :func:`remove_tenant`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from types import TracebackType

from engine.config import Settings
from engine.contract.codec import decode_tenant, encode_tenant
from engine.contract.ids import validate_name, validate_tenant_id
from engine.contract.messages import TenantConfig
from engine.contract.signing import check_public_keys
from engine.errors import DecodeError, KafkaUnavailableError, ValidationError
from engine.runtime.kafka import OFFSET_BEGINNING, plain
from engine.runtime.kafka.ports import Record, topic_reader
from engine.runtime.kafka.schemas import ensure_published

DEFAULT_WEIGHT = 1.0
BROKER_WAIT_ENV = "EPOCHQ_BROKER_WAIT_S"


def _broker_wait_s(default: float = 30.0) -> float:
    """``EPOCHQ_BROKER_WAIT_S`` when it is a number of seconds above 0, else ``default``."""
    try:
        wait = float(os.environ.get(BROKER_WAIT_ENV, default))
    except ValueError:
        return default
    return wait if math.isfinite(wait) and wait > 0 else default


LOAD_TIMEOUT_S = _broker_wait_s()
"""How long reading the table whole waits for a broker to answer (an engine's start waits this long, then exits 3):
30 s, or ``EPOCHQ_BROKER_WAIT_S`` (a test that starts an engine with no broker on purpose sets 3)."""
WRITE_TIMEOUT_S = 30.0
TAIL_WAIT_MS = 500
"""How long the broker may hold the directory's fetch at the end of the topic: a new record still comes back
at once (``fetch.min.bytes`` is 1); only an idle table is asked about less often (a 20 ms wait was 50 fetches a
second, about 6 ms of CPU a second in the engine and more in the broker)."""


class TenantDirectory:
    """Every tenant's weight, queue limit and product, as the ``<ns>.tenants`` topic says."""

    def __init__(self, settings: Settings, timeout: float = LOAD_TIMEOUT_S, *, load: bool = True):
        self.topic, self._bootstrap = settings.tenants_topic, settings.require_bootstrap()
        self.skipped = 0
        self._tenants: dict[str, TenantConfig] = {}
        self._reader = topic_reader(settings, "tenants", fetch_wait_ms=TAIL_WAIT_MS)
        if load:
            self.load(timeout)

    def load(self, timeout: float = LOAD_TIMEOUT_S) -> None:
        """Read the topic whole: every partition from its beginning to its current end."""
        self._tenants.clear()
        partitions = self._partitions(timeout)
        ends = self._unread_ends(partitions, timeout)
        self._reader.assign(self.topic, {p: OFFSET_BEGINNING for p in partitions})
        deadline = time.monotonic() + timeout
        while not self._caught_up(ends):
            if time.monotonic() > deadline:
                raise KafkaUnavailableError(f"could not read {self.topic} to its end within {timeout}s")
            self._apply_all(self._reader.read(1000, 0.2))

    def refresh(self, max_records: int = 1000) -> int:
        """Apply what arrived since the last call, without waiting; the number of records seen."""
        batch = self._reader.read(max_records, 0)
        self._apply_all(batch)
        return len(batch)

    def weight(self, tenant: str) -> float:
        """The tenant's fair-share weight; 1.0 for a tenant the table does not know."""
        config = self._tenants.get(tenant)
        return config.weight if config else DEFAULT_WEIGHT

    def max_queued(self, tenant: str) -> int | None:
        """The tenant's limit on queued jobs; ``None`` for no limit."""
        config = self._tenants.get(tenant)
        return config.max_queued if config else None

    def public_keys(self, tenant: str) -> tuple[bytes, ...]:
        """The Ed25519 public keys that sign the tenant's commands; none for a tenant without keys."""
        config = self._tenants.get(tenant)
        return config.public_keys if config else ()

    def tenants_of_product(self, product: str) -> list[str]:
        """The ids of the tenants of ``product``, sorted."""
        return sorted(t for t, c in self._tenants.items() if c.product == product)

    def scoped(self, scope: str | None) -> tuple[str, ...]:
        """The tenants a scoped job fans out to (``global``, ``product:<name>``), from the table as it is now."""
        if scope == "global":
            return tuple(sorted(self._tenants))
        if scope and scope.startswith("product:"):
            return tuple(self.tenants_of_product(scope.split(":", 1)[1]))
        return ()

    def all(self) -> dict[str, TenantConfig]:
        """A copy of the whole table, by tenant id."""
        return dict(self._tenants)

    def close(self) -> None:
        """Stop following the topic."""
        self._reader.close()

    def __enter__(self) -> TenantDirectory:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _partitions(self, timeout: float) -> list[int]:
        return self._reader.partitions(self.topic, "read", timeout, where=f" from Kafka at {self._bootstrap}")

    def _unread_ends(self, partitions: list[int], timeout: float) -> dict[int, int]:
        """The end offset of each partition that holds records now (low watermark below high)."""
        out, deadline = {}, time.monotonic() + timeout
        for p in partitions:
            low, high = self._reader.watermarks(self.topic, p, deadline - time.monotonic())
            if high > low:
                out[p] = high
        return out

    def _caught_up(self, ends: dict[int, int]) -> bool:
        """Whether every partition's position reached the end it had when loading began."""
        if not ends:
            return True
        positions = self._reader.positions(self.topic, ends)
        return all(offset >= ends[p] for p, offset in positions.items())

    def _apply_all(self, batch: list[Record]) -> None:
        for record in batch:
            self._apply(record.key(), record.value())

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        """Fold one record: a tombstone deletes the tenant, a config sets it, garbage is skipped."""
        if value is None:
            self._tenants.pop(key.decode() if key else "", None)
            return
        try:
            config = decode_tenant(value)
        except DecodeError:
            self.skipped += 1
            return
        self._tenants[key.decode() if key else config.tenant_id] = config


def tenant_config(tenant_id: str, weight: float, max_queued: int | None = None, product: str | None = None,
                  updated_at: int = 0, public_keys: Sequence[bytes] = ()) -> TenantConfig:
    """A validated tenant configuration; ValidationError naming the field that is wrong."""
    validate_tenant_id(tenant_id)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise ValidationError(f"weight must be a finite number > 0, got {weight!r}")
    if max_queued is not None and (isinstance(max_queued, bool) or not isinstance(max_queued, int) or max_queued < 1):
        raise ValidationError(f"max_queued must be an integer >= 1, got {max_queued!r}")
    if product is not None:
        validate_name("product", product)
    keys = check_public_keys(public_keys)
    return TenantConfig(tenant_id, updated_at, float(weight), max_queued, product, *keys)


def set_tenant(settings: Settings, tenant_id: str, weight: float, max_queued: int | None = None,
               product: str | None = None, public_keys: Sequence[bytes] | None = None) -> TenantConfig:
    """Write a tenant's configuration to ``<ns>.tenants`` (acks=all); returns what was written.

    ``public_keys``: the Ed25519 keys that sign the tenant's commands; ``None`` keeps the ones
    the table has (a new weight never drops a tenant's keys), ``[]`` removes them.
    """
    config = tenant_config(tenant_id, weight, max_queued, product, time.time_ns() // 1000, public_keys or ())
    if public_keys is None:  # checked first: a bad value reads nothing
        with TenantDirectory(settings) as directory:
            config = tenant_config(tenant_id, weight, max_queued, product, config.updated_at,
                                   directory.public_keys(tenant_id))
    _write(settings, tenant_id, encode_tenant(config))
    return config


def remove_tenant(settings: Settings, tenant_id: str) -> None:
    """Remove a tenant: a tombstone for its key, which compaction eventually drops."""
    _write(settings, validate_tenant_id(tenant_id), None)


def tenants_writer(settings: Settings) -> plain.Writer:
    """An idempotent writer to the tenants topic, keyed with the Java-compatible partitioner."""
    return plain.writer(settings, {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random"})


def _write(settings: Settings, tenant_id: str, value: bytes | None) -> None:
    if value is not None:
        ensure_published(settings, "tenant")
    tenants_writer(settings).write(settings.tenants_topic, [(tenant_id.encode(), value)],
                f"cannot write to {settings.tenants_topic}", WRITE_TIMEOUT_S)
