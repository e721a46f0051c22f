"""Errors raised by the local Kafka broker manager, grouped by what the caller does.

Every error derives from :class:`BrokerError`; the CLI prints its one-line ``message``
(then any ``detail``, such as a log tail) and exits with code 2.  Messages say how to
recover.
"""

from __future__ import annotations

try:  # join epochq's error tree so `epochq` reports these like any other EpochqError
    from engine.errors import BrokerError as _EngineBrokerError
except ImportError:  # pragma: no cover - engine.errors not available
    _EngineBrokerError = Exception  # type: ignore[assignment,misc]

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


class BrokerError(_EngineBrokerError):
    """Base class: something about the local broker went wrong.

    ``message`` is one line saying what happened and what to do; ``detail`` holds
    optional supporting text (a log or Maven output tail) shown after it.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.message}\n{self.detail}" if self.detail else self.message


class PrerequisiteError(BrokerError):
    """A tool the broker needs is missing: install it, then retry."""


class JavaNotFoundError(PrerequisiteError):
    """No usable ``java`` (JDK/JRE 17+) on PATH."""


class MavenNotFoundError(PrerequisiteError):
    """No ``mvn`` on PATH, so the Kafka jars cannot be fetched."""


class JarFetchError(BrokerError):
    """Maven ran but did not produce the Kafka jars (network or repository trouble)."""


class PortInUseError(BrokerError):
    """A port asked for explicitly is already taken: pick another or stop its owner."""


class BrokerAlreadyRunningError(BrokerError):
    """A broker with a different shape is already running from the same home: stop it first."""


class BrokerNotRunningError(BrokerError):
    """An operation needs a running broker (or node) that is not there."""


class BrokerStartError(BrokerError):
    """The broker could not be started; the message carries its log tail."""


class BrokerExitedError(BrokerStartError):
    """A broker JVM exited while starting."""


class BrokerTimeoutError(BrokerStartError):
    """The broker did not become ready within the timeout."""
