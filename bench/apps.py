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
