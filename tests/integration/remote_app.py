"""Handlers of a remote pool (``gpu``) and one in-process task, for the remote workers' tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

from engine import App, RetryPolicy

app = App()
MARKS = Path(os.environ.get("EPOCHQ_TEST_MARKS", "/tmp/epochq-test-marks"))
FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.1, max_delay=0.2)


def mark(kind: str, line: str) -> None:
    """One line per execution, for the test to read (appends are atomic for short lines)."""
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / f"{kind}.log", "a") as f:
        f.write(line + "\n")


@app.task("remote.echo", pool="gpu", retry=FAST_RETRY)
def echo(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Return the payload, with the process that ran it."""
    return {"echo": payload, "pid": os.getpid(), "token": ctx.fencing_token}


@app.task("remote.flaky", pool="gpu", retry=FAST_RETRY)
def flaky(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Fail the first attempt, succeed the next."""
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails")
    return {"attempt": ctx.attempt}


@app.task("remote.slow", pool="gpu", lease=3, retry=FAST_RETRY)
def slow(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Say it started (job, attempt, pid), then sleep ``payload['seconds']`` (``payload['then']`` for attempts after
    the first, if given), or less: until the file ``payload['open_when']`` exists."""
    mark("slow", f"{ctx.job_id} {ctx.attempt} {os.getpid()} started")
    seconds = payload.get("then", payload.get("seconds", 0)) if ctx.attempt > 1 else payload.get("seconds", 0)
    gate, until = payload.get("open_when"), time.monotonic() + float(seconds)
    while time.monotonic() < until and not (gate and Path(gate).exists()):
        time.sleep(min(0.05, max(0.0, until - time.monotonic())))
    mark("slow", f"{ctx.job_id} {ctx.attempt} {os.getpid()} done")
    return {"attempt": ctx.attempt, "pid": os.getpid()}


@app.task("remote.nobody", pool="nobody")
def nobody(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """A pool no worker serves in the tests."""


@app.task("local.echo")
def local_echo(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Run in the engine's own process."""
    return {"pid": os.getpid()}


@app.task("remote.emit", pool="gpu", retry=FAST_RETRY)
def emit(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Produce one record to ``payload['topic']``; the first attempt then fails if ``payload['fail_first']``."""
    ctx.produce(payload["topic"], f"attempt {ctx.attempt}", key=ctx.job_id, headers={"token": str(ctx.fencing_token)})
    if payload.get("fail_first") and ctx.attempt == 1:
        raise RuntimeError("failed after producing")
    return {"attempt": ctx.attempt}


@app.task("remote.emit.once", pool="gpu", retry=RetryPolicy(max_attempts=1))
def emit_once(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """Produce ``payload['size']`` random bytes (they do not compress) to ``payload['topic']``, one attempt only."""
    ctx.produce(payload["topic"], os.urandom(int(payload["size"])), key=ctx.job_id)


@app.task("remote.until_cancelled", pool="gpu", lease=3)
def until_cancelled(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """Say it started, then run until asked to stop (at most 60 s)."""
    mark("cancel", f"{ctx.job_id} {ctx.attempt} {os.getpid()} started")
    end = time.monotonic() + 60
    while time.monotonic() < end:
        ctx.raise_if_cancelled()
        time.sleep(0.05)


@app.task("remote.deps", pool="gpu")
def deps(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Return what the jobs it waited for returned (``ctx.dependency_results``)."""
    return {"seen": ctx.dependency_results}
