"""The engine loop and the partition lifecycle: the tick's steps, each in a module of its own.

``Engine`` is imported on first use, so the step modules (admit, dispatch, timers, outcomes) can be
imported without the Kafka adapter: ``engine.testing`` drives them on a virtual clock.
"""

from __future__ import annotations

from typing import Any

from engine.runtime.loop.options import DEFAULT_SLOTS, EngineOptions

__all__ = ["DEFAULT_SLOTS", "Engine", "EngineOptions"]


def __getattr__(name: str) -> Any:
    """``Engine`` on first use (it brings in the Kafka adapter)."""
    if name == "Engine":
        from engine.runtime.loop.engine import Engine

        return Engine
    raise AttributeError(f"module 'engine.runtime.loop' has no attribute {name!r}")
