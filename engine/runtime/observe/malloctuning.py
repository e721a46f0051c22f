"""The C heap of an engine process: glibc malloc settings that return freed memory to the system.

glibc's malloc adapts two thresholds as the process runs: once a large block (an mmapped one)
is freed, blocks of that size are carved from the heap instead (the mmap threshold rises, up to
32 MiB), and the heap is trimmed only above a threshold that rises with it. Each thread that
allocates under contention also gets an arena of its own, up to 8 per core. An engine mixes
RocksDB's memtable blocks, librdkafka's fetch and produce buffers (a record can be a megabyte)
and Python objects over a dozen threads, so after a few large records, freed memory stayed
resident in the heaps: RSS crept under garbage input (issue 11). Fixing both thresholds at their
initial 128 KiB and capping the arenas at two per core keeps large blocks in mmap (given back
on free) and the heaps trimmed. Measured with bench/garbage.py (docs/benchmarks.md, "Memory
under garbage input"): over 100,000 malformed records, RSS 72.6 -> 104.5 MB without, 71.8 ->
90.8 MB with, nearly all of the growth left being RocksDB's memtables, bounded by their budget.

``EPOCHQ_MALLOC_TUNING=off`` leaves malloc as it is (for comparison, or under another
allocator preloaded with LD_PRELOAD). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
THRESHOLD_BYTES = 128 * 1024
ARENAS_PER_CORE = 2
SWITCH = "EPOCHQ_MALLOC_TUNING"


def settings(cores: int) -> dict[int, int]:
    """The mallopt parameters and their values for a machine of ``cores`` cores."""
    return {M_MMAP_THRESHOLD: THRESHOLD_BYTES, M_TRIM_THRESHOLD: THRESHOLD_BYTES,
            M_ARENA_MAX: ARENAS_PER_CORE * max(1, cores)}


def tune_malloc() -> bool:
    """Apply :func:`settings` through glibc's mallopt, before the engine starts its threads; True if applied."""
    if os.environ.get(SWITCH, "on").strip().lower() in ("off", "0", "false", "no"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only: elsewhere mallopt means something else
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in settings(os.cpu_count() or 1).items())
