"""Testing handlers without a broker: ``TestEngine`` runs the engine's rules on a virtual clock, in memory.

    from engine.testing import TestEngine

    with TestEngine(app) as t:
        job = t.submit("email.send", {"to": "a@b.c"}, tenant="acme")
        t.advance(hours=5)
        assert t.status(job.job_id).status == "completed"

It imports no Kafka client and no RocksDB (checked by import-linter); docs/testing.md.
"""

from __future__ import annotations

from engine.testing.engine import TestEngine, TestHandle
from engine.testing.virtual import BusyError

__all__ = ["BusyError", "TestEngine", "TestHandle"]
