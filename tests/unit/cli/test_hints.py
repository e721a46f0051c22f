"""A filter that matched nothing says what it might have meant."""

from __future__ import annotations

from engine.cli.hints import no_match


def test_a_tenant_in_another_case_a_prefix_or_a_typo_is_suggested() -> None:
    seen = ["acme", "globex"]
    assert no_match("job", "--tenant", "ACME", seen, "tenant") == \
        "--tenant 'ACME' matched no job (filters match exactly); did you mean 'acme'? tenants seen: acme, globex"
    assert "did you mean 'globex'?" in no_match("job", "--tenant", "glob", seen, "tenant")
    assert "did you mean 'acme'?" in no_match("job", "--tenant", "acm", seen, "tenant")
    assert "did you mean" not in no_match("job", "--tenant", "zzz", seen, "tenant")
    assert no_match("dead job", "--task-type", "x", [], "task type") == \
        "--task-type 'x' matched no dead job, and no task type has been seen here"
