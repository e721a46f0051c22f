"""Unit tests need no broker: none of them may resolve a fingerprint through a namespace's `<ns>.schemas`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine.runtime.kafka.schemas import stop_reading_through


@pytest.fixture(autouse=True)
def no_schema_sources() -> Iterator[None]:
    """Whatever an integration test earlier in the run left installed (a module's engine, a session's console),
    a unit test's record with an unknown fingerprint is decided by the codec alone, without reading a topic."""
    stop_reading_through()
    yield

