"""The integration handlers, in an engine whose store reports corruption once: the first read of job
``corrupt-job``'s record raises ProjectionCorruptedError, as RocksDB does for a damaged block."""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import ProjectionCorruptedError
from projections.store import ProjectionStore
from tests.integration.apps import app

__all__ = ["app"]

KEY = b"j:corrupt-job"
FIRED = Path(os.environ.get("EPOCHQ_TEST_MARKS", "/tmp/epochq-test-marks")) / "corrupted-once"
_real_read = ProjectionStore._read


def _read(self: ProjectionStore, key: bytes) -> bytes | None:
    if key == KEY and not FIRED.exists():
        FIRED.parent.mkdir(parents=True, exist_ok=True)
        FIRED.touch()
        raise ProjectionCorruptedError(f"{self.path}: Corruption: block checksum mismatch (injected)")
    return _real_read(self, key)


ProjectionStore._read = _read  # type: ignore[method-assign]
