"""A CPU-bound handler beside no-op jobs, for bench/remote_workers.py --burn: ``burn`` runs in the engine, or in
workers of pool ``cpu`` when EPOCHQ_BENCH_BURN_POOL=cpu."""

from __future__ import annotations

import os
import time

from engine import App

app = App()


@app.task("noop")
def noop(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """Does nothing: its submit-to-start latency is the decision loop's."""
    return None


@app.task("burn", pool=os.environ.get("EPOCHQ_BENCH_BURN_POOL") or None)
def burn(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """50 ms of pure Python (holds the GIL of whatever process runs it)."""
    end = time.perf_counter() + float(payload.get("seconds", 0.05))
    n = 0
    while time.perf_counter() < end:
        n += 1


@app.task("hold", pool="hold", lease=5)
def hold(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Sleep ``payload['seconds']`` in a worker of pool ``hold`` (lease 5 s): for bench/worker_faults.py."""
    time.sleep(float(payload.get("seconds", 10)))
    return {"pid": os.getpid()}
