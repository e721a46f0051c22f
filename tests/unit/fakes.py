"""Stand-ins the unit tests share for what a fold writes into (never for Kafka)."""

from __future__ import annotations


class Reader:
    """A dict standing in for a batch: get, put, delete, scan (the fold's whole interface to it)."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def scan(self, prefix: bytes):  # type: ignore[no-untyped-def]
        return sorted((k, v) for k, v in self.data.items() if k.startswith(prefix))
