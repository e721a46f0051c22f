"""How far the view trails the log: per partition, the records not folded yet and the age of the newest folded;
and the records its fold did not apply (fenced, ignored, set aside), counted: outside a zombie's late write only a
forged record is one (``projections.views.aside``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.config import Settings
from engine.errors import EpochqError
from engine.runtime.kafka.ports import topic_reader
from engine.runtime.view.follow import newest_folded
from projections.lock import holder_of
from engine.questions.readers import READERS
from projections.store import ASIDE_COUNTED, ProjectionStore, view_root
from projections.views.aside import read_aside


@dataclass(frozen=True)
class PartitionLag:
    """One events partition as the view has folded it."""

    partition: int
    end_offset: int  # the offset after the partition's last record now
    applied_offset: int  # the last offset the view folded (-1: none; no store: -1 too)
    newest_event_us: int  # occurred_at of the newest event folded (0: unknown)
    aside: dict[str, int] = field(default_factory=dict)  # records the fold did not apply, by kind
    counted: bool = True  # False: the store was made before it counted them (the counts miss its early records)

    @property
    def ignored(self) -> int:
        """Records of the partition the view's fold did not apply (fenced, ignored, poison, undecodable)."""
        return sum(self.aside.values())

    @property
    def lag(self) -> int:
        """Records (and transaction markers) of the log the view has not folded yet."""
        return max(0, self.end_offset - (self.applied_offset + 1))

    def age_s(self, now_us: int) -> float | None:
        """Seconds since the newest folded event happened (None when unknown)."""
        return max(0.0, (now_us - self.newest_event_us) / 1e6) if self.newest_event_us else None


@dataclass(frozen=True)
class ViewStatus:
    """The view of a state directory: who folds it, and how far behind the log each partition is."""

    directory: str
    holder: str | None  # the process folding it as its lock says (None: no view runs there)
    partitions: list[PartitionLag]

    @property
    def lag(self) -> int:
        """Records not folded yet, over every partition."""
        return sum(p.lag for p in self.partitions)

    @property
    def ignored(self) -> int:
        """Records the view's fold did not apply, over every partition."""
        return sum(p.ignored for p in self.partitions)

    def ignored_line(self) -> str:
        """``N record(s) ignored (fenced 2, ignored 1)``: what the view's fold did not apply, by kind."""
        kinds: dict[str, int] = {}
        for p in self.partitions:
            for kind, n in p.aside.items():
                kinds[kind] = kinds.get(kind, 0) + n
        detail = ", ".join(f"{kind} {n}" for kind, n in kinds.items() if n)
        partial = "" if all(p.counted for p in self.partitions) else " (a store made before counting misses some)"
        return f"{self.ignored} record(s) ignored" + (f" ({detail})" if detail else "") + partial

    def as_json(self, now_us: int) -> dict[str, object]:
        """The stable ``view status --json`` document."""
        return {"directory": self.directory, "running": self.holder is not None, "holder": self.holder,
                "lag": self.lag, "ignored": self.ignored,
                "partitions": [{"partition": p.partition, "end_offset": p.end_offset,
                                "applied_offset": p.applied_offset, "lag": p.lag,
                                "newest_event_age_s": _rounded(p.age_s(now_us)), "ignored": p.aside,
                                "ignored_counted": p.counted} for p in self.partitions]}


def view_status(settings: Settings) -> ViewStatus:
    """The view of ``settings.state_dir`` against the end of every events partition now."""
    stores = dict(READERS.stores(settings))
    applied = {p: store.applied_offset() for p, store in stores.items()}
    with topic_reader(settings, "view-status") as reader:
        partitions = reader.partitions(settings.events_topic)
        ends = reader.end_offsets(settings.events_topic, partitions)
    newest = newest_folded(settings)
    root = view_root(settings.state_dir, settings.namespace)
    rows = [PartitionLag(p, ends[p], applied.get(p, -1), newest.get(p, 0), *_aside(stores.get(p))) for p in partitions]
    return ViewStatus(str(root), holder_of(root), rows)


def _aside(store: ProjectionStore | None) -> tuple[dict[str, int], bool]:
    """A store's counts of records its fold did not apply, and whether it counted them from its first commit."""
    if store is None:
        return {}, True
    return read_aside(store), store.applied_offset() < 0 or store.get(ASIDE_COUNTED) is not None


MARKER_SLACK = 1
"""The commit marker after a partition's last record: the view has folded everything before it."""
CATCH_UP_S = 3.0
"""How long a question waits for a running view to fold what the log held when it was asked."""


def await_view(settings: Settings, timeout_s: float = CATCH_UP_S) -> None:
    """Wait (up to ``timeout_s``) until a running view has folded every record the log held now, so an
    answer includes what was committed before the question (read your writes); nothing without a view process."""
    if holder_of(view_root(settings.state_dir, settings.namespace)) is None:
        return
    try:
        ends = _ends(settings, timeout_s)
    except EpochqError:
        return  # the log does not answer: the view's answer stands, as it is
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        applied = {p: store.applied_offset() for p, store in READERS.stores(settings)}
        if all(applied.get(p, -1) + 1 >= end - MARKER_SLACK for p, end in ends.items() if end > 0):
            return
        time.sleep(0.02)


def _ends(settings: Settings, timeout_s: float) -> dict[int, int]:
    with topic_reader(settings, "view-status") as reader:
        partitions = reader.partitions(settings.events_topic, "read", timeout_s)
        return reader.end_offsets(settings.events_topic, partitions, timeout_s)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
