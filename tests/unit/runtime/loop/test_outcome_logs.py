"""The engine's log names every failed attempt (WARNING) and every dead letter (ERROR)."""

from __future__ import annotations

import logging

import pytest

from engine.contract import messages as m
from engine.runtime.loop.outcomes import log_failures
from tests.unit.factories import event


def test_failures_and_dead_letters_are_logged_with_job_task_attempt_and_error(
        caplog: pytest.LogCaptureFixture) -> None:
    events = [event(m.JobFailed(3, "SMTPError", "mailbox full", 1200), "job-7"),
              event(m.JobDeadLettered("max_attempts_exhausted", 3), "job-7"),
              event(m.JobSucceeded(1, 5), "job-8")]
    with caplog.at_level(logging.INFO, logger="epochq.outcomes"):
        log_failures(events, "email.send")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "job job-7 (email.send, tenant acme) attempt 3 failed: SMTPError: mailbox full"),
        ("ERROR", "job job-7 (email.send, tenant acme) dead-lettered after 3 attempt(s): max_attempts_exhausted"),
    ]
