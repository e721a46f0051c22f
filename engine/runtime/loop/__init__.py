"""The engine loop and the partition lifecycle: the tick's steps, each in a module of its own."""

from engine.runtime.loop.engine import Engine
from engine.runtime.loop.options import DEFAULT_SLOTS, EngineOptions

__all__ = ["DEFAULT_SLOTS", "Engine", "EngineOptions"]
