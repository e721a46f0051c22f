"""Which tenant a lane serves next: weighted fair queuing by virtual time (start-time fair queuing). Pure.

Each lane keeps a system virtual time ``V`` and, per tenant, the virtual finish tag ``F``
of the tenant's last served job. Serving a job of cost ``c`` for a tenant of weight ``w``:

    start  = max(V, F[tenant])
    finish = start + c / w          (stored as F[tenant])
    V      = max(V, start)          (monotonic)

The picker serves the backlogged tenant with the smallest start tag. A tenant that was
idle has ``F <= V`` and so starts at ``V``, not at zero: idleness earns no burst.

Virtual time is an integer number of units (``VTIME_SCALE`` units per unit of cost over
weight), so folding the same starts anywhere gives byte-identical state. A finish tag
at or below ``V`` means exactly what a missing one means, so the canonical state keeps
only the tags above ``V``: its size is bounded by the tenants served recently, not by
every tenant ever seen.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from engine.errors import ValidationError

VTIME_SCALE = 1_000_000
"""Virtual-time units per unit of ``cost / weight`` (a job of cost 1 at weight 1)."""

MAX_PRIORITY = 9


@dataclass(frozen=True, slots=True)
class FairState:
    """One lane's fair-share clock: the system virtual time and the tenants' finish tags.

    Both are integers in ``VTIME_SCALE`` units. The state is canonical: tags at or below
    the clock are dropped on construction (they mean the same as no tag).
    """

    system_vtime: int = 0
    finish_tags: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        vtime = _as_int(self.system_vtime)
        tags = {t: _as_int(self.finish_tags[t]) for t in sorted(self.finish_tags)}
        tags = {t: f for t, f in tags.items() if f > vtime}
        object.__setattr__(self, "finish_tags", MappingProxyType(tags))

    def finish_tag(self, tenant: str) -> int:
        """The tenant's finish tag; the clock itself if the tenant has none above it."""
        return max(self.system_vtime, self.finish_tags.get(tenant, 0))

    def to_dict(self) -> dict[str, object]:
        """Plain numbers and strings, for storing in the projection."""
        return {"system_vtime": self.system_vtime, "finish_tags": dict(self.finish_tags)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> FairState:
        """The state ``to_dict`` produced (canonicalised)."""
        tags = data.get("finish_tags") or {}
        if not isinstance(tags, Mapping):
            raise ValidationError(f"finish_tags must be a mapping, got {type(tags).__name__}", "finish_tags")
        return cls(data.get("system_vtime", 0), {str(t): v for t, v in tags.items()})  # type: ignore[arg-type]

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes: equal states give equal bytes."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> FairState:
        """The state ``to_bytes`` produced."""
        return cls.from_dict(json.loads(raw))


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"virtual time must be a non-negative integer, got {value!r}", "virtual_time")
    return value


@dataclass(frozen=True, slots=True)
class TenantHead:
    """The first queued job of one backlogged tenant in a lane, with the tenant's weight."""

    tenant: str
    weight: float
    priority: int = 5
    due_at: int = 0
    arrival: int = 0
    cost: float = 1.0
    units: int = field(init=False, repr=False, compare=False)  # service_units(weight, cost)
    key: bytes = field(init=False, repr=False, compare=False)  # the job's order within its tenant

    def __post_init__(self) -> None:
        # Worked out once per head rather than on every pick that compares it.
        check_weight(self.weight)
        check_cost(self.cost)
        object.__setattr__(self, "units", service_units(self.weight, self.cost))
        object.__setattr__(self, "key", within_tenant_key(self.priority, self.due_at, self.arrival))

    @classmethod
    def from_order(cls, tenant: str, weight: float, units: int, order: bytes) -> TenantHead:
        """The head of a queued job from its order within the tenant (``within_tenant_key`` bytes, then
        anything after a colon), its tenant's weight and the units that weight costs: what dispatch
        reads off a ready-queue key. ValidationError (ValueError from ``int``) when the order is not a valid one."""
        inverse, due, arrival = order.split(b":", 3)[:3]
        priority, due_at, arrival_at = MAX_PRIORITY - int(inverse), int(due), int(arrival)
        if not 0 <= priority <= MAX_PRIORITY or due_at < 0 or arrival_at < 0 or len(due) != 20 or len(arrival) != 20:
            raise ValidationError(f"not a queued job's order: {order[:64]!r}", "order")
        head = _HeadSlots()  # filled with plain stores, then made a TenantHead: its checks ran above
        head.tenant, head.weight, head.priority = tenant, weight, priority
        head.due_at, head.arrival, head.cost, head.units = due_at, arrival_at, 1.0, units
        head.key = order[:len(inverse) + 42]
        head.__class__ = cls
        return cast(TenantHead, head)


_HeadSlots: Any = type("_TenantHeadSlots", (), {"__slots__": TenantHead.__slots__})


def check_weight(weight: float) -> float:
    """``weight`` if it is a finite number above zero; ValidationError naming ``weight`` otherwise."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise ValidationError(f"weight must be a finite number > 0, got {weight!r}", "weight")
    return float(weight)


def check_cost(cost: float) -> float:
    """``cost`` if it is a finite number above zero; ValidationError naming ``cost`` otherwise."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost <= 0:
        raise ValidationError(f"cost must be a finite number > 0, got {cost!r}", "cost")
    return float(cost)


def service_units(weight: float, cost: float = 1.0) -> int:
    """The virtual time one job of ``cost`` takes a tenant of ``weight``: ``cost / weight`` in units.

    At least one unit, so every service moves the tenant's tag forward.
    """
    return max(1, round(check_cost(cost) * VTIME_SCALE / check_weight(weight)))


def start_tag(state: FairState, tenant: str) -> int:
    """The virtual start of the tenant's next job: ``max(V, F[tenant])``."""
    return state.finish_tag(tenant)


def pick(state: FairState, heads: Sequence[TenantHead]) -> str | None:
    """The tenant to serve next: smallest start tag; ties by finish tag, head job, tenant id.

    ``heads`` holds one entry per backlogged tenant (its first queued job); ``None`` when
    no tenant is backlogged. Only the heads are looked at, never the backlogs.
    """
    if not heads:
        return None
    return min(heads, key=lambda head: _order(state, head)).tenant


def _order(state: FairState, head: TenantHead) -> tuple[int, int, bytes, str]:
    start = start_tag(state, head.tenant)
    return start, start + head.units, head.key, head.tenant


def charge(state: FairState, tenant: str, weight: float, cost: float = 1.0) -> FairState:
    """The lane's state after serving one job of ``cost`` for ``tenant`` at ``weight``."""
    return advance(state, tenant, service_units(weight, cost))


def advance(state: FairState, tenant: str, units: int) -> FairState:
    """The lane's state after serving ``units`` of virtual time for ``tenant``.

    This is the fold of one job start: store ``units`` (from :func:`service_units`) in
    the start event, so a rebuild does not depend on the weight the tenant has today.
    """
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise ValidationError(f"units must be a positive integer, got {units!r}", "units")
    start = start_tag(state, tenant)
    vtime = max(state.system_vtime, start)
    tags = {t: f for t, f in state.finish_tags.items() if f > vtime}  # canonical: only tags above the clock
    tags[tenant] = start + units
    after = object.__new__(FairState)  # valid by construction: skip __post_init__'s checks on the hot path
    object.__setattr__(after, "system_vtime", vtime)
    object.__setattr__(after, "finish_tags", MappingProxyType(tags))
    return after


def within_tenant_key(priority: int, due_at: int, arrival: int) -> bytes:
    """The order of a tenant's queued jobs as bytes: priority (higher first), due time, arrival.

    Byte order equals the wanted order, so it can prefix a RocksDB index key.
    """
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
        raise ValidationError(f"priority must be 0-9, got {priority!r}", "priority")
    for name, value in (("due_at", due_at), ("arrival", arrival)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError(f"{name} must be a non-negative integer, got {value!r}", name)
    return b"%d:%020d:%020d" % (MAX_PRIORITY - priority, due_at, arrival)


def served_shares(counts: Mapping[str, int]) -> dict[str, float]:
    """Each tenant's share of the services counted (0.0 each when nothing was served)."""
    total = sum(counts.values())
    return {t: (n / total if total else 0.0) for t, n in sorted(counts.items())}


def weight_shares(weights: Mapping[str, float]) -> dict[str, float]:
    """The share each tenant is owed while all of them are backlogged: its weight over the sum."""
    total = sum(check_weight(w) for w in weights.values())
    return {t: w / total for t, w in sorted(weights.items())}
