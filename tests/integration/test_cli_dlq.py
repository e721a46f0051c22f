"""``epochq dlq`` against a real broker and engine: a replay stays within the tenant asked, the list reads
newest first, ``show`` reads like ``history``, and a filter's replay asks first."""

from __future__ import annotations

from pathlib import Path

from engine.client import Client
from engine.config import Settings
from tests.integration.conftest import eventually, start_engine
from tests.integration.helpers.cli import epochq, one_line


def _replays(client: Client, job_id: str) -> int:
    return sum(1 for e in client.status(job_id).events if e.event.type == "JobReplayed")


def test_dlq_replay_list_and_show(settings: Settings, client: Client, engines, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    state = ("--state-dir", str(engine.state_dir))
    acme = client.submit("fragile", {"fixed_when": str(tmp_path / "never")}, tenant="acme")
    assert acme.wait(30).status == "dead"
    globex = client.submit("email.send", {"to": "a@b.c"}, tenant="globex")  # invalid payload: dead at once
    assert globex.wait(30).status == "dead"
    eventually(lambda: "2 dead job(s)" in epochq(settings, "dlq", "list", *state).stdout, what="two dead jobs listed")


    other = epochq(settings, "dlq", "replay", acme.job_id, "--tenant", "globex", "--reason", "x", *state)
    assert other.returncode == 1, (other.stdout, other.stderr)
    assert one_line(other) == f"epochq: error: job {acme.job_id} is not a dead job of tenant 'globex'"
    assert "replay requested" not in other.stdout and _replays(client, acme.job_id) == 0

    listing = epochq(settings, "dlq", "list", *state)
    lines = listing.stdout.splitlines()
    assert lines[0].startswith("dead at (UTC)") and "last error" in lines[0], lines
    assert globex.job_id in lines[1] and acme.job_id in lines[2], lines  # newest first
    assert lines[1][:4] == "20" + lines[1][2:4] and lines[1][23] == "Z", lines  # the time of death, in UTC
    assert "ConnectionError: dependency down" in lines[2]

    show = epochq(settings, "dlq", "show", acme.job_id, *state)
    assert show.returncode == 0, show.stderr
    assert show.stdout.startswith(f"job {acme.job_id}: dead (max_attempts_exhausted) at 20"), show.stdout
    assert "attempt 1 failed at 20" in show.stdout and "ConnectionError: dependency down" in show.stdout
    assert '    raise ConnectionError("dependency down")' in show.stdout and "\\n" not in show.stdout

    unasked = epochq(settings, "dlq", "replay", "--tenant", "acme", "--reason", "fixed", *state)
    assert unasked.returncode == 2 and "1 dead job(s) match; give --yes" in unasked.stderr, unasked.stderr
    assert _replays(client, acme.job_id) == 0
    done = epochq(settings, "dlq", "replay", "--tenant", "acme", "--since", "1h", "--reason", "fixed", "--yes",
                  *state)
    assert done.returncode == 0 and "1 job(s) sent for replay" in done.stdout, (done.stdout, done.stderr)
    eventually(lambda: _replays(client, acme.job_id) == 1, what="one replay of acme's job")
    assert _replays(client, globex.job_id) == 0
