"""The operator's console: a web UI over the projections and the log that writes nothing but commands.

``epochq console`` serves it on 127.0.0.1 (``engine run --console-port`` inside an engine
process); docs/console.md describes its pages, its security and its stable selectors.
"""

from __future__ import annotations

from engine.console.security import ConsoleAccess

__all__ = ["ConsoleAccess"]
