"""``make demo``'s output: log lines above the progress line, never through it, in the engine's time format."""

from __future__ import annotations

import io
import logging

import pytest

from examples.demo_output import CLEAR, ProgressLog


def record(message: str) -> logging.LogRecord:
    rec = logging.LogRecord("epochq.outcomes", logging.WARNING, __file__, 1, message, None, None)
    rec.created = 1_780_315_200.12
    return rec


def test_on_a_terminal_a_log_line_goes_above_the_progress_line(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    log = ProgressLog()
    log.tty = True
    log.progress("4. progress: 1/3 final", 1)
    log.emit(record("attempt 1 failed"))
    log.progress("4. progress: 3/3 final", 3)
    log.done()
    assert out.getvalue() == (f"{CLEAR}4. progress: 1/3 final"
                              f"{CLEAR}2026-06-01T12:00:00.120Z WARNING epochq.outcomes attempt 1 failed\n"
                              f"4. progress: 1/3 final{CLEAR}4. progress: 3/3 final\n")


def test_without_a_terminal_progress_is_a_line_each_time_a_job_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    log = ProgressLog()
    log.tty = False
    for final in (0, 0, 1, 1, 2):
        log.progress(f"4. progress: {final}/2 final", final)
    log.emit(record("dead-lettered"))
    log.done()
    assert out.getvalue().splitlines() == ["4. progress: 0/2 final", "4. progress: 1/2 final",
                                           "4. progress: 2/2 final",
                                           "2026-06-01T12:00:00.120Z WARNING epochq.outcomes dead-lettered"]
