"""Handlers for benchmarks."""

from __future__ import annotations

from engine import App

app = App()


@app.task("noop")
def noop(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """Does nothing: the benchmark measures the engine, not the handler."""
    return None


@app.task("noop_async")
async def noop_async(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """Does nothing, on the engine's event loop (no thread hand-off)."""
    return None


@app.task("work")
def work(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """A job with a fixed cost, so the engine's capacity is known."""
    import time

    time.sleep(float(payload.get("seconds", 0.002)))


@app.task("emit")
def emit(ctx, payload: dict) -> None:  # type: ignore[no-untyped-def]
    """Produces ``payload['records']`` records of ``payload['bytes']`` bytes to ``payload['topic']`` (ctx.produce)."""
    value = b"x" * int(payload.get("bytes", 100))
    for _ in range(int(payload.get("records", 1))):
        ctx.produce(payload["topic"], value, key=ctx.job_id)


@app.task("gate", timeout=600)
def gate(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Runs until the file named in the payload exists: the benchmark decides when it succeeds."""
    import time
    from pathlib import Path

    while not Path(payload["open_when"]).exists():
        time.sleep(0.002)
    return {"opened": True}


@app.task("fan_in")
def fan_in(ctx, payload: dict) -> dict:  # type: ignore[no-untyped-def]
    """Reads what it waited for: how many results reached it."""
    return {"results": len(ctx.dependency_results)}
