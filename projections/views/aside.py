"""What a full fold did not apply, counted by kind: the source of truth for "records this view ignored".

Every record of the log gets a verdict (``projections.evolve``); the ones that change nothing are
counted here, in the same WriteBatch as the applied offset, so a rebuild from offset 0 counts the
same. Kinds: ``fenced_claim`` (an ``OwnershipClaimed`` that is not the valid claim's successor),
``fenced`` (an event outside the valid claim's epoch), ``ignored`` (an event the job's lifecycle
forbids where the job stands, or one no view takes), ``poison`` (its fold raised) and ``undecodable``.
Outside a zombie's late write, only a forged record is one: the owner's restore counts the fenced
ones in ``epochq_unknown_writes_total``; ``epochq view status`` shows these beside the view's lag.
A write model (``WRITE_MODEL``) keeps no counts.
"""

from __future__ import annotations

from typing import Protocol

from projections.views.keys import ASIDE, ASIDE_KINDS


class _Readable(Protocol):
    def get(self, key: bytes) -> bytes | None: ...


class _Writable(_Readable, Protocol):
    def put(self, key: bytes, value: bytes | None) -> None: ...


def count_aside(batch: _Writable, kind: str) -> None:
    """One more record of ``kind`` the fold did not apply."""
    key = ASIDE + kind.encode()
    raw = batch.get(key)
    batch.put(key, b"%d" % ((int(raw) if raw is not None else 0) + 1))


def read_aside(reader: _Readable) -> dict[str, int]:
    """Every kind's count of records the fold did not apply (0 for a kind never met)."""
    counts = {}
    for kind in ASIDE_KINDS:
        raw = reader.get(ASIDE + kind.encode())
        counts[kind] = int(raw) if raw is not None else 0
    return counts
