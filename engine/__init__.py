"""epochq: an event-sourced job scheduling engine on a Kafka log.

The public API is small: ``App`` registers handlers, ``Client`` submits and watches jobs,
``RetryPolicy`` says how failures are retried, ``JobContext`` is what a handler is given,
``Outcome`` is what ``handle.wait()`` returns, ``Cancelled`` is how a handler stops when asked
to. Errors live in ``engine.errors``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["App", "Cancelled", "Client", "RetryPolicy", "JobContext", "Outcome", "errors"]

_WHERE = {
    "App": "engine.app",
    "Client": "engine.client",
    "Outcome": "engine.client",
    "RetryPolicy": "engine.domain.retry",
    "JobContext": "engine.runtime.execution.context",
    "Cancelled": "engine.runtime.execution.context",
    "errors": "engine.errors",
}


def __getattr__(name: str) -> Any:
    """Import public names on first use, so ``import engine`` stays cheap."""
    if name not in _WHERE:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    module = import_module(_WHERE[name])
    return module if name == "errors" else getattr(module, name)
