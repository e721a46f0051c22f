"""Changes folded from several events, readable before they are committed to the store."""

from __future__ import annotations

from collections.abc import Iterator

from projections.store import ProjectionStore


class Batch:
    """A read-through overlay of pending puts and deletes over a ProjectionStore."""

    def __init__(self, store: ProjectionStore):
        self.store = store
        self.changes: dict[bytes, bytes | None] = {}
        self.last_offset = -1
        self.job_cache = store.job_cache

    def get(self, key: bytes) -> bytes | None:
        """The value as it will be after commit."""
        if key in self.changes:
            return self.changes[key]
        return self.store.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        """Stage a put."""
        self.changes[key] = value

    def delete(self, key: bytes) -> None:
        """Stage a delete."""
        self.changes[key] = None

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Committed pairs under ``prefix`` merged with the staged ones, in key order."""
        staged = {k: v for k, v in self.changes.items() if k.startswith(prefix)}
        merged = dict(self.store.scan(prefix))
        merged.update(staged)
        for key in sorted(merged):
            if merged[key] is not None:
                yield key, merged[key]  # type: ignore[misc]

    def commit(self) -> None:
        """Write the staged changes and the last applied offset in one WriteBatch."""
        if self.last_offset >= 0:
            self.store.commit(self.changes, self.last_offset)
        self.changes = {}
