"""A filter that matched nothing says what it might have meant; a dead-letter page follows its cursor."""

from __future__ import annotations

from engine.cli.dlq import dead_page
from engine.cli.hints import no_match
from engine.contract import messages as m
from engine.domain.jobs import JobView
from engine.domain.lifecycle import JobState
from engine.questions.jobs import decode_cursor


def test_a_tenant_in_another_case_a_prefix_or_a_typo_is_suggested() -> None:
    seen = ["acme", "globex"]
    assert no_match("job", "--tenant", "ACME", seen, "tenant") == \
        "--tenant 'ACME' matched no job (filters match exactly); did you mean 'acme'? tenants seen: acme, globex"
    assert "did you mean 'globex'?" in no_match("job", "--tenant", "glob", seen, "tenant")
    assert "did you mean 'acme'?" in no_match("job", "--tenant", "acm", seen, "tenant")
    assert "did you mean" not in no_match("job", "--tenant", "zzz", seen, "tenant")
    assert no_match("dead job", "--task-type", "x", [], "task type") == \
        "--task-type 'x' matched no dead job, and no task type has been seen here"


def _dead(job_id: str, at: int) -> JobView:
    return JobView(job_id, "acme", "t", JobState.DEAD, 5, "NORMAL", 1, m.Payload(b"{}"), 0, at, 1, finished_at=at)


def test_dead_pages_follow_their_cursor_newest_first_without_repeats() -> None:
    jobs = [_dead("b", 30), _dead("a", 20), _dead("c", 20), _dead("d", 10)]  # newest first, then by id
    first, cursor = dead_page(jobs, None, 2)
    assert [j.job_id for j in first] == ["b", "a"] and cursor is not None
    second, cursor = dead_page(jobs, decode_cursor(cursor), 2)
    assert [j.job_id for j in second] == ["c", "d"] and cursor is None
