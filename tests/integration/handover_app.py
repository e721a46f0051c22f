"""The handlers of the hand-over tests (test_handover.py, bench/rolling_restart.py): a long job held open by a gate,
and one that takes its engine down."""

from __future__ import annotations

import os
import time
from pathlib import Path

from engine import App, RetryPolicy

app = App()
MARKS = Path(os.environ.get("EPOCHQ_TEST_MARKS", "/tmp/epochq-test-marks"))


@app.task("long", retry=RetryPolicy(max_attempts=2, base_delay=0.1, jitter=0.0), timeout=300)
def long_job(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Runs until the file ``open_when`` exists (or for ``seconds``), stopping if asked to; with ``fail_once``, the
    first attempt to get through in each engine process fails (a handler's own failure: one that counts toward
    max_attempts; per process, so an attempt left running where the job no longer runs cannot use it up)."""
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / "long.log", "a") as f:
        f.write(f"{ctx.job_id} {ctx.attempt} {ctx.epoch} {os.getpid()} {time.time():.3f}\n")
    gate = Path(payload["open_when"]) if "open_when" in payload else None
    until = time.monotonic() + float(payload.get("seconds", 290))
    while time.monotonic() < until and not (gate is not None and gate.exists()):
        ctx.raise_if_cancelled()
        time.sleep(0.05)
    failed = MARKS / f"failed-{ctx.job_id}-{os.getpid()}"
    if payload.get("fail_once") and not failed.exists():
        failed.touch()
        raise ConnectionError(f"downstream unavailable (attempt {ctx.attempt})")
    return {"attempt": ctx.attempt, "epoch": ctx.epoch, "pid": os.getpid()}


@app.task("crash", retry=RetryPolicy(max_attempts=3, max_lost=1), timeout=300)
def crash(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Takes its engine down (as an out-of-memory kill or a segfault would) every time it runs, once it is noted."""
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / "crash.log", "a") as f:
        f.write(f"{ctx.job_id} {ctx.attempt} {ctx.epoch} {os.getpid()}\n")
    os._exit(1)
