"""The local broker manager's errors: the ``BrokerError`` branch of epochq's one error tree.

They are defined in ``engine.errors`` (under ``FatalError``: stop and fix the cause) and named
here too, where the broker modules have always imported them. The CLI prints the one-line
``message`` (then any ``detail``, such as a log tail) and exits with code 2. Messages say how
to recover.
"""

from __future__ import annotations

from engine.errors import (
    BrokerAlreadyRunningError,
    BrokerError,
    BrokerExitedError,
    BrokerNotRunningError,
    BrokerStartError,
    BrokerTimeoutError,
    JarFetchError,
    JavaNotFoundError,
    MavenNotFoundError,
    PortInUseError,
    PrerequisiteError,
)

__all__ = [
    "BrokerError",
    "PrerequisiteError",
    "JavaNotFoundError",
    "MavenNotFoundError",
    "JarFetchError",
    "PortInUseError",
    "BrokerAlreadyRunningError",
    "BrokerNotRunningError",
    "BrokerStartError",
    "BrokerExitedError",
    "BrokerTimeoutError",
]
