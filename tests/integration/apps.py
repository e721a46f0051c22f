"""Handlers the integration tests run in real engine processes."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel

from engine import App, RetryPolicy
from engine.domain.breaker import BreakerPolicy

app = App()
MARKS = Path(os.environ.get("EPOCHQ_TEST_MARKS", "/tmp/epochq-test-marks"))


def mark(kind: str, ctx) -> None:  # type: ignore[no-untyped-def]
    """Leave a trace of one execution (job, attempt, epoch, pid) for the test to count."""
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / f"{kind}.log", "a") as f:
        f.write(f"{ctx.job_id} {ctx.attempt} {ctx.epoch} {os.getpid()}\n")


@app.task("noop", retry=RetryPolicy(max_attempts=3, base_delay=0.1))
def noop(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    return {"ok": True}


@app.task("echo")
def echo(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    return {"payload": payload, "tenant": ctx.tenant, "attempt": ctx.attempt}


@app.task("slow", retry=RetryPolicy(max_attempts=5, base_delay=0.1), timeout=60)
def slow(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    mark("slow", ctx)
    time.sleep(float(payload.get("seconds", 0.2)))
    return {"slept": payload.get("seconds", 0.2), "pid": os.getpid(), "epoch": ctx.epoch}


@app.task("flaky", retry=RetryPolicy(max_attempts=4, base_delay=0.2, max_delay=5, jitter=0.0))
def flaky(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Fails until a marker file named in the payload exists (the 'fix')."""
    mark("flaky", ctx)
    if not Path(payload["fixed_when"]).exists():
        raise ConnectionError(f"downstream unavailable (attempt {ctx.attempt})")
    return {"fixed": True, "attempt": ctx.attempt}


class Email(BaseModel):
    to: str
    subject: str


@app.task("email.send")
def send_email(ctx, payload: Email) -> dict:  # type: ignore[no-untyped-def]
    return {"sent_to": payload.to}


@app.task("fragile", retry=RetryPolicy(max_attempts=1),
          breaker=BreakerPolicy(failure_threshold=3, window_s=30, cooldown_s=3.0))
def fragile(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Fails while the file named in the payload is missing; its breaker opens after 3 failures."""
    mark("fragile", ctx)
    if not Path(payload["fixed_when"]).exists():
        raise ConnectionError("dependency down")
    return {"ok": True}


@app.task("bulk", lane="BATCH", timeout=60)
def bulk(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    time.sleep(float(payload.get("seconds", 1.0)))
    return {"bulk": True}


@app.task("otp", lane="HIGH")
def otp(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    return {"otp": True}


@app.task("per_tenant.sync", retry=RetryPolicy(max_attempts=2, base_delay=0.1, jitter=0.0))
def per_tenant_sync(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Runs once per tenant of a scoped job; fails for the tenants listed in the payload."""
    mark("per_tenant", ctx)
    if ctx.tenant in payload.get("broken", []):
        raise RuntimeError(f"tenant {ctx.tenant}: export failed")
    return {"tenant": ctx.tenant}


@app.task("patient", timeout=120)
def patient(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Works in small steps and stops at the next step once asked to (ctx.raise_if_cancelled)."""
    for _ in range(int(float(payload.get("seconds", 60)) * 20)):
        ctx.raise_if_cancelled()
        time.sleep(0.05)
    return {"finished": True}


@app.task("deaf", timeout=120)
def deaf(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Never looks at ctx.cancelled: only the cancel grace stops it."""
    time.sleep(float(payload.get("seconds", 5)))
    return {"finished": True}


@app.task("apatient", timeout=120)
async def apatient(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """An async handler: a cancel request cancels its task."""
    import asyncio

    await asyncio.sleep(float(payload.get("seconds", 60)))
    return {"finished": True}


@app.task("progressing", timeout=60)
def progressing(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Reports progress, then holds at 3 of 4 steps until asked to stop (or for 50 s: a test reads it running
    through a few CLI processes first, slow on a busy machine)."""
    for step in range(1, 4):
        ctx.progress(step / 4, f"step {step} of 4")
        time.sleep(0.2)
    ctx.sleep(50)
    ctx.raise_if_cancelled()  # woken by a cancel: stop (returning would complete the job)
    return {"steps": 3}


@app.task("shaky", retry=RetryPolicy(max_attempts=4, base_delay=0.2, max_delay=1, jitter=0.0))
def shaky(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Fails on its first two attempts, then succeeds: two retries on the job's timeline."""
    if ctx.attempt <= 2:
        raise ConnectionError(f"upstream timed out (attempt {ctx.attempt})")
    return {"attempt": ctx.attempt}


@app.task("gated", timeout=120)
def gated(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Marks that it started, then runs until the file named in the payload exists (the test opens the gate)."""
    mark("gated", ctx)
    gate = Path(payload["open_when"])
    for _ in range(2400):  # 120 s at most
        if gate.exists():
            return {"gated": True, "attempt": ctx.attempt}
        time.sleep(0.05)
    raise TimeoutError(f"the gate {gate} never opened")


@app.task("gather")
def gather(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Returns what it waited for: each dependency's result (ctx.dependency_results) and its own payload."""
    mark("gather", ctx)
    return {"dependencies": ctx.dependency_results, "payload": payload}


LONG_TASK_TYPE = "invoice.render." + "r" * 185
"""A task type of the longest name admitted (200 characters): the console's pages must still fit the window."""


@app.task(LONG_TASK_TYPE, retry=RetryPolicy(max_attempts=1))
def long_named(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Fails with a 300-character message when the payload says so; else succeeds."""
    if payload.get("fail"):
        raise ValueError("cannot render the invoice: " + "z" * 300)
    return {"rendered": True}
