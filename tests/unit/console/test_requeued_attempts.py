"""Every view counts attempts as max_attempts does: a job handed over twice shows "1 of 1", never "3 of 1"."""

from __future__ import annotations

import re

from engine.console.got import get
from engine.console.jobpage import _job_details
from engine.console.web import templates
from engine.contract import messages as m
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState


def test_the_job_page_counts_no_requeued_attempt() -> None:
    job = JobView("job-1", "acme", "long", JobState.COMPLETED, 5, "NORMAL", 1, m.Payload(b"{}"), 0, 0, 3,
                  attempt=3, requeued=2)
    record, outcome = get(lambda: (0, job)), get(lambda: None)
    html = templates.env.get_template("_job_live.html").render(
        job_id="job-1", record=record, outcome=outcome, live=True, csrf="x", **_job_details(record, outcome))
    found = re.search(r'<dd id="attempts">(.*?)</dd>', html)
    assert found is not None and found.group(1) == "1 of 1 (and 2 re-queued, not counted)"


def test_listings_and_dead_letters_count_the_same_way() -> None:
    from engine.cli.dlq import dead_json, dead_text
    from engine.questions.jobs import row_of

    job = JobView("job-1", "acme", "long", JobState.DEAD, 5, "NORMAL", 2, m.Payload(b"{}"), 0, 0, 3,
                  attempt=4, requeued=2, dead_reason="max_attempts_exhausted")
    assert row_of(job, 0).attempts == 2 and dead_json(job)["attempts"] == 2
    assert "  attempts: 2" in dead_text(job)
