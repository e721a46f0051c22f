"""What librdkafka says, in epochq's own log: one place for every client's log and error callbacks.

librdkafka repeats a failure as often as it retries (a closed port: ~30 lines a second across an engine's
clients). Every client epochq configures (``Settings.kafka_config``) sends its log lines and its errors to
one logger through :class:`Throttle`: at most one line of a kind per ``every`` seconds, the next saying how
many like it were left out. Connection failures are warnings, and a line that says the client is retrying
is information: a client retries them by itself. No librdkafka log line is more than a warning in our log:
a failure that matters surfaces as an error the edge translates (``engine.runtime.kafka``), and the code
that meets it says so in its own words, once (a refused transaction: one ERROR line naming the grant).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

EVERY_S = 20.0
"""At most one line of a kind per this many seconds."""
THREAD_PREFIX = re.compile(r"^\[thrd:[^\]]*\]:\s*")


class Throttle(logging.Filter):
    """Lets one record of a kind through per ``every`` seconds and counts the rest into the next one."""

    def __init__(self, every: float = EVERY_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.every, self.clock = every, clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is shown; one that is gets a plain message, and how many like it were not."""
        kind, text = _kind_and_text(record)
        now = self.clock()
        with self._lock:
            last, dropped = self._seen.get(kind, (float("-inf"), 0))
            if now - last < self.every:
                self._seen[kind] = (last, dropped + 1)
                return False
            self._seen[kind] = (now, 0)
        if dropped:
            text += f" ({dropped} more like it in the last {self.every:g} s)"
        record.msg, record.args = f"kafka: {text}", None
        if text.endswith("retrying") and record.levelno > logging.INFO:  # e.g. a coordinator still loading
            record.levelno, record.levelname = logging.INFO, "INFO"
        elif record.levelno > logging.WARNING:  # the edge's translation of the failure is the one ERROR
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return logging.getLogger(record.name).isEnabledFor(record.levelno)  # at its new level


def _kind_and_text(record: logging.LogRecord) -> tuple[str, str]:
    """(kind, message) of a librdkafka log line (``"%s [%s] %s"``: facility, client, message) or error."""
    args = record.args if isinstance(record.args, tuple) else ()
    if len(args) == 3:
        facility, _, message = (str(a) for a in args)
        return facility, THREAD_PREFIX.sub("", message)
    return "ERROR:" + str(getattr(record, "code", "")), record.getMessage()


def throttled(logger: logging.Logger, every: float = EVERY_S) -> logging.Logger:
    """``logger`` with a :class:`Throttle` (once, however often it is asked)."""
    if not any(isinstance(f, Throttle) for f in logger.filters):
        logger.addFilter(Throttle(every))
    return logger


def error_callback(logger: logging.Logger) -> Callable[[Any], None]:
    """A client's ``error_cb``: each error (a ``KafkaError``) one line in ``logger``, as its log lines are."""
    def report(error: Any) -> None:
        fatal = bool(getattr(error, "fatal", lambda: False)())
        logger.log(logging.ERROR if fatal else logging.WARNING, "%s", error.str(), extra={"code": error.code()})
    return report
