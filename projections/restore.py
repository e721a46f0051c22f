"""The one restorer: decode a partition's log records and fold them into its store, in log order.

It serves a live owner catching its store up before claiming (and after a transaction it
could not fold in order) and ``epochq projections rebuild`` alike, so both reach the same
bytes. It reads nothing itself: whoever drives it hands it ``(offset, value)`` records
(``projections.rebuild.LogReader`` names that role). A record that does not decode, or
whose fold raises, is set aside with its position recorded, never a reason to stop; a record of
a type this version's schema does not have (written by a newer engine) is skipped and counted
by type (``unknown_types``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from engine.contract import messages as m
from engine.contract.codec import decode_event_at
from engine.errors import DecodeError, UnknownTypeError
from projections.batch import Batch
from projections.evolve import POISON, Folded, fold_guarded
from projections.profile import FULL, Profile
from projections.views.aside import count_aside
from projections.store import ProjectionStore

COMMIT_EVERY = 5000
Folder = Callable[[m.Event, Folded], None]


class Restorer:
    """Folds records of ``topic[partition]`` into ``store``, committing every ``commit_every`` records."""

    def __init__(self, store: ProjectionStore, topic: str, partition: int, *,
                 on_folded: Folder | None = None, commit_every: int = COMMIT_EVERY, profile: Profile = FULL):
        self.store, self.topic, self.partition = store, topic, partition
        self.batch = Batch(store, profile=profile)
        self.on_folded = on_folded
        self.commit_every = commit_every
        self.folded = 0
        self.set_aside = 0
        self.unknown_types: Counter[str] = Counter()

    @property
    def next_offset(self) -> int:
        """The offset of the first record not yet folded (committed or pending)."""
        pending = self.batch.last_offset
        return (pending if pending >= 0 else self.store.applied_offset()) + 1

    def feed(self, records: Iterable[tuple[int, bytes | None]]) -> int:
        """Fold ``records`` in order, skipping any already folded; how many were folded."""
        n = 0
        first = self.next_offset
        for offset, value in records:
            if offset < first:
                continue
            self._fold_one(offset, value)
            n += 1
            if self.folded % self.commit_every == 0:
                self.batch.commit()
        return n

    def _fold_one(self, offset: int, value: bytes | None) -> None:
        self.folded += 1
        try:
            event = decode_event_at(value, self.topic, self.partition, offset)  # type: ignore[arg-type]
        except DecodeError as e:
            if isinstance(e, UnknownTypeError):
                self.unknown_types[e.type_name] += 1
            self.set_aside += 1
            self.batch.last_offset = offset
            if not self.batch.slim:
                count_aside(self.batch, "undecodable")
            return
        folded = fold_guarded(self.batch, event, offset)
        if folded.status == POISON:
            self.set_aside += 1
        if self.on_folded is not None:
            self.on_folded(event, folded)

    def finish(self) -> None:
        """Commit what is pending."""
        self.batch.commit()
