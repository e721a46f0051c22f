"""What ``make demo`` prints while it runs: log lines above one progress line, every time in one format."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

CLEAR = "\r\033[K"


class LineFormatter(logging.Formatter):
    """``time level logger message``, the time in UTC, ISO 8601, milliseconds: the engine's own line format."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """UTC, ISO 8601, milliseconds."""
        return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ProgressLog(logging.Handler):
    """A log handler that keeps a progress line at the bottom: a record clears it, prints, and draws it again.

    Log lines use the engine's format (ISO-8601 UTC, as ``history`` shows times). Without a terminal the
    progress is printed as lines, one each time the count of final jobs changes.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(LineFormatter())
        self.tty = sys.stdout.isatty()
        self.line, self.shown_final = "", -1

    def progress(self, line: str, final: int) -> None:
        """Draw (or, without a terminal, print when ``final`` moved) the progress line."""
        if self.tty:
            sys.stdout.write(CLEAR + line)
        elif final != self.shown_final:
            sys.stdout.write(line + "\n")
        self.line, self.shown_final = line, final
        sys.stdout.flush()

    def done(self) -> None:
        """The progress is over: the next output starts on a line of its own."""
        if self.tty and self.line:
            sys.stdout.write("\n")
        self.line = ""
        sys.stdout.flush()

    def emit(self, record: logging.LogRecord) -> None:
        """One record above the progress line."""
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - a log line never stops the demo
            self.handleError(record)
            return
        self.above(text)

    def above(self, text: str) -> None:
        """One line (a record, or a line the engine's process logged) above the progress line."""
        if self.tty and self.line:
            sys.stdout.write(CLEAR + text + "\n" + self.line)
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()


def install(level: int = logging.WARNING) -> ProgressLog:
    """Route every log record at ``level`` and above through one :class:`ProgressLog`."""
    handler = ProgressLog()
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    return handler
