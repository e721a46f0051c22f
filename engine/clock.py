"""The wall clock: the one place epochq reads the time of day, in microseconds since 1970 (UTC).

Decisions never read it: the loop reads it once per tick and passes ``now`` in (domain code
takes time as an argument), and ``engine.testing`` passes a virtual clock instead.
"""

from __future__ import annotations

import time


def now_us() -> int:
    """Wall-clock time in microseconds since 1970 (UTC)."""
    return time.time_ns() // 1000
