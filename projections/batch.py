"""A partition's pending state: changes folded from events, readable before they are committed.

The owner folds what it decides into its batch at once, so the next decision in the same
tick sees it; the batch is committed to the store (with the applied offset, in one
WriteBatch) after the Kafka transaction that carries those events commits, and dropped if
it aborts. A rebuild folds the log through a batch the same way.

Job records stay decoded (``JobView``) while pending and are encoded once per job at
commit. A *savepoint* lets the owner undo what one input folded when a step raises, so a
poison record is set aside without leaving half its changes behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from engine.domain.jobs import JobView
from projections.profile import FULL, Profile
from projections.views.jobs import encode_job, remember
from projections.views.keys import job_key
from projections.views.listing import catalog_changes, rolled_up

if TYPE_CHECKING:  # types only: a batch folds over any store with this interface (engine.testing's in memory)
    from projections.store import ProjectionStore

Watch = Callable[[bytes, "bytes | None"], None]
_ABSENT: Any = object()


class Batch:
    """A read-through overlay of pending puts, deletes and job records over a ProjectionStore."""

    __slots__ = ("store", "changes", "jobs", "listed", "last_offset", "job_cache", "watch", "watched", "_journal",
                 "profile", "slim")

    def __init__(self, store: ProjectionStore, watch: Watch | None = None, watched: tuple[bytes, ...] = (),
                 profile: Profile = FULL):
        self.store = store
        self.profile = profile  # what the fold keeps (projections.profile)
        self.slim = profile.write_model
        self.changes: dict[bytes, bytes | None] = {}
        self.jobs: dict[str, JobView | None] = {}  # None: the job left the write model (its record is deleted)
        self.listed: dict[str, JobView | None] = {}  # job id -> its record as committed (the catalog's "before")
        self.last_offset = -1
        self.job_cache = store.job_cache
        self.watch = watch  # told of every put or delete of a key whose first two bytes are in ``watched``
        self.watched = frozenset(watched)
        self._journal: list[tuple[Any, ...]] | None = None

    def get(self, key: bytes) -> bytes | None:
        """The value as it will be after commit."""
        if key in self.changes:
            return self.changes[key]
        return self.store.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Stage a put (None: a delete)."""
        if self._journal is not None:
            self._journal.append((key, self.changes.get(key, _ABSENT)))
        self.changes[key] = value
        if self.watch is not None and key[:2] in self.watched:
            self.watch(key, value)

    def delete(self, key: bytes) -> None:
        """Stage a delete."""
        self.put(key, None)

    def put_job(self, job: JobView) -> None:
        """Stage a job record (encoded at commit)."""
        if self._journal is not None:
            self._journal.append((job.job_id, self.jobs.get(job.job_id, _ABSENT), "job"))
        self.jobs[job.job_id] = job

    def drop_job(self, job_id: str) -> None:
        """Stage the deletion of a job record (it left the write model)."""
        if self._journal is not None:
            self._journal.append((job_id, self.jobs.get(job_id, _ABSENT), "job"))
        self.jobs[job_id] = None

    def range(self, start: bytes, stop: bytes, limit: int) -> list[bytes]:
        """Up to ``limit`` keys in ``[start, stop)`` as they will be after commit, in order."""
        staged = {k: v for k, v in self.changes.items() if start <= k < stop}
        found: list[bytes] = []
        for key in self.store.key_range(start, stop):
            if key not in staged:
                found.append(key)
                if len(found) >= limit:
                    break
        found.extend(k for k, v in staged.items() if v is not None)
        return sorted(found)[:limit]

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Committed pairs under ``prefix`` merged with the staged ones, in key order."""
        staged = {k: v for k, v in self.changes.items() if k.startswith(prefix)}
        merged: dict[bytes, bytes | None] = dict(self.store.scan(prefix))
        merged.update(staged)
        for key in sorted(merged):
            value = merged[key]
            if value is not None:
                yield key, value

    # --- savepoints ------------------------------------------------------------------------

    def savepoint(self) -> None:
        """Start journaling: :meth:`rollback` undoes every change made from here on."""
        self._journal = []

    def release(self) -> None:
        """Keep the changes made since the savepoint."""
        self._journal = None

    def rollback(self) -> None:
        """Undo every change made since the savepoint (a step raised while folding one input)."""
        journal, self._journal = self._journal or [], None
        for entry in reversed(journal):
            if len(entry) == 3:
                self._undo_job(entry[0], entry[1])
            else:
                self._undo(entry[0], entry[1])

    def _undo(self, key: bytes, old: Any) -> None:
        if old is _ABSENT:
            self.changes.pop(key, None)
            value = self.store.get(key)
        else:
            self.changes[key] = value = old
        if self.watch is not None and key[:2] in self.watched:
            self.watch(key, value)

    def _undo_job(self, job_id: str, old: Any) -> None:
        if old is _ABSENT:
            self.jobs.pop(job_id, None)
        else:
            self.jobs[job_id] = old

    # --- committing ------------------------------------------------------------------------

    def __bool__(self) -> bool:
        return bool(self.changes) or bool(self.jobs) or self.last_offset >= 0

    def commit(self) -> None:
        """Write the staged changes and the last applied offset in one WriteBatch; start afresh."""
        if self.last_offset >= 0:
            changes, cache = self.changes, self.job_cache
            for job_id, job in self.jobs.items():
                changes[job_key(job_id)] = None if job is None else encode_job(job)
            if not self.slim:
                counts: dict[bytes, int] = {}
                catalog_changes(self.jobs, self.listed, changes, counts)  # type: ignore[arg-type]
                self._add_counts(counts)
            self.store.commit(changes, self.last_offset, indexed=not self.slim)
            for job_id, job in self.jobs.items():
                if job is None:
                    cache.pop(job_id, None)
                else:
                    remember(cache, job_id, job)
        self.clear()

    def _add_counts(self, counts: dict[bytes, int]) -> None:
        """Turn counter deltas into puts of the counters' new values (0 deletes the counter)."""
        changes, get = self.changes, self.get
        for key, delta in rolled_up(counts).items():
            if delta:
                value = int(get(key) or 0) + delta
                changes[key] = b"%d" % value if value else None

    def clear(self) -> None:
        """Drop everything staged (the transaction that carried it aborted)."""
        self.changes = {}
        self.jobs = {}
        self.listed = {}
        self.last_offset = -1
        self._journal = None
