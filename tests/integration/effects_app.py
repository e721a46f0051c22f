"""Handlers that produce records (``ctx.produce``) and write to a sink guarded by fencing tokens."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from engine import App, RetryPolicy

app = App()
MARKS = Path(os.environ.get("EPOCHQ_TEST_MARKS", "/tmp/epochq-test-marks"))


def mark(kind: str, line: str) -> None:
    """One line per execution, for the test to count (appends are atomic for short lines)."""
    MARKS.mkdir(parents=True, exist_ok=True)
    with open(MARKS / f"{kind}.log", "a") as f:
        f.write(line + "\n")


@app.task("emit", retry=RetryPolicy(max_attempts=5, base_delay=0.1), timeout=60)
def emit(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Produce one record per call to ``payload['topic']``, after ``payload['seconds']``."""
    mark("emit", f"{ctx.job_id} {ctx.attempt} {ctx.epoch} {os.getpid()}")
    time.sleep(float(payload.get("seconds", 0)))
    body = {"job_id": ctx.job_id, "attempt": ctx.attempt, "epoch": ctx.epoch}
    ctx.produce(payload["topic"], json.dumps(body), key=ctx.job_id, headers={"job": ctx.job_id})
    if payload.get("fail"):
        raise RuntimeError("failed after producing")
    return {"produced": 1}


@app.task("emit.async", retry=RetryPolicy(max_attempts=1))
async def emit_async(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    ctx.produce(payload["topic"], b"x" * int(payload.get("size", 1)), key=ctx.job_id)
    return {"produced": 1}


@app.task("emit.once", retry=RetryPolicy(max_attempts=1))
def emit_once(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Produce one record of ``payload['size']`` random bytes (they do not compress) to ``payload['topic']``."""
    ctx.produce(payload["topic"], os.urandom(int(payload.get("size", 1))), key=ctx.job_id)
    return {"produced": 1}


@app.task("sink", retry=RetryPolicy(max_attempts=5, base_delay=0.1), timeout=120)
def sink(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Write to a sqlite row guarded by the fencing token, after ``payload['seconds']`` (docs/handlers.md)."""
    token = ctx.fencing_token
    mark("sink", f"{ctx.job_id} {ctx.attempt} {ctx.epoch} {token} started")
    time.sleep(float(payload.get("seconds", 0)))
    db = sqlite3.connect(payload["db"], timeout=30)
    with db:
        db.execute("INSERT OR IGNORE INTO balances (account, amount, token) VALUES (?, 0, -1)", (payload["account"],))
        written = db.execute("UPDATE balances SET amount = ?, token = ? WHERE account = ? AND token < ?",
                             (payload["amount"], token, payload["account"], token)).rowcount
    db.close()
    mark("sink", f"{ctx.job_id} {ctx.attempt} {ctx.epoch} {token} {'written' if written else 'rejected'}")
    return {"written": bool(written), "token": token}
