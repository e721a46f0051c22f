"""What a newcomer meets first, on a real broker: a typo in a task type is refused at submit with a did-you-mean; a
duplicate submit says one thing; the job it duplicates is no duplicate; ``audit | head`` ends quietly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from engine.client import Client
from engine.config import Settings
from engine.questions.workers import announced_task_types, list_workers
from tests.integration.conftest import ROOT, eventually, start_engine
from tests.integration.helpers.cli import epochq, one_line


def test_submit_refuses_a_task_type_no_engine_handles_and_a_duplicate_says_one_thing(  # type: ignore[no-untyped-def]
        settings: Settings, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    eventually(lambda: announced_task_types(list_workers(settings)), what="the engine's task types announced")

    typo = epochq(settings, "submit", "email.sen", "--tenant", "acme")
    assert typo.returncode == 2 and typo.stdout == "", typo
    assert one_line(typo) == ("epochq: error: task type: no running engine handles task type 'email.sen': "
                              "did you mean 'email.send'? give --force to go ahead anyway")
    forced = epochq(settings, "submit", "email.sen", "--tenant", "acme", "--force")
    assert forced.returncode == 0 and " submitted to partition " in forced.stdout, forced
    job_id = forced.stdout.split()[1]
    state = ("--state-dir", str(engine.state_dir))  # the view the engine keeps beside it

    def rejected() -> str:
        listed = epochq(settings, "jobs", "list", "--status", "rejected", "--tenant", "acme", *state)
        return listed.stdout if job_id in listed.stdout else ""

    listing = eventually(rejected, what="the rejected submit listed").splitlines()
    assert listing[0] == "rejected 1", listing
    assert " rejected " in listing[2] and "email.sen" in listing[2] and "unknown_task_type" in listing[2], listing

    first = epochq(settings, "submit", "echo", "--tenant", "acme", "--key", "order-7", "--wait", "--json")
    assert first.returncode == 0, first
    original = json.loads(first.stdout)
    assert original["status"] == "completed" and original["duplicate"] is False, original
    again = epochq(settings, "submit", "echo", "--tenant", "acme", "--key", "order-7")
    assert again.returncode == 0 and again.stdout == "", again  # not "submitted" beside "no new job"
    assert one_line(again) == (f"epochq: duplicate: key 'order-7' is job {original['job_id']} (completed); "
                               "no new job was submitted")
    waited = epochq(settings, "submit", "echo", "--tenant", "acme", "--key", "order-7", "--wait", "--json")
    assert json.loads(waited.stdout)["duplicate"] is True, waited

    status = epochq(settings, "status", original["job_id"], "--json")  # its history has two DuplicateSubmitted now
    assert status.returncode == 0 and json.loads(status.stdout)["duplicate"] is False, status.stdout
    with Client(settings) as client:
        assert client.status(original["job_id"]).duplicate is False


def test_audit_into_a_pipe_closed_early_ends_quietly(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    handles = client.submit_many([{"task_type": "echo", "payload": {"n": n, "pad": "x" * 200}, "tenant": "acme"}
                                  for n in range(120)])
    assert {o.status for o in client.wait_all(handles, 90)} == {"completed"}
    cmd = [sys.executable, "-m", "engine.cli.main", "audit", "--tenant", "acme", "--format", "jsonl",
           "--bootstrap", settings.require_bootstrap(), "--namespace", settings.namespace,
           "--state-dir", str(engine.state_dir)]  # through the store's tenant index, as beside an engine
    audit = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert audit.stdout is not None and audit.stderr is not None
    assert json.loads(audit.stdout.readline())["tenant"] == "acme"  # `| head -1`: one line read, then gone
    audit.stdout.close()
    err = audit.stderr.read().decode()
    assert audit.wait(60) == 141, err  # 128 + SIGPIPE, as a shell reports a writer whose reader went away
    assert "Traceback" not in err and "Exception ignored" not in err and "BrokenPipe" not in err, err


def test_dlq_list_pages_and_filters_that_match_nothing_say_what_is_there(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    state = ("--state-dir", str(engine.state_dir))
    handles = client.submit_many([{"task_type": "email.send", "payload": {"n": n}, "tenant": "acme"}
                                  for n in range(5)])  # an invalid payload: dead at once
    dead = {o.job_id for o in client.wait_all(handles, 60) if o.status == "dead"}
    assert len(dead) == 5
    eventually(lambda: "of 5 dead job(s)" in epochq(settings, "dlq", "list", *state).stdout, what="5 dead listed")

    seen: list[str] = []
    cursor: tuple[str, ...] = ()
    for _ in range(3):  # 2 + 2 + 1
        page = epochq(settings, "dlq", "list", "--limit", "2", *cursor, *state)
        assert page.returncode == 0, page
        lines = page.stdout.splitlines()
        seen += [next(w for w in line.split() if w in dead) for line in lines[1:-2]]  # the job id column
        last = lines[-1]
        cursor = ("--cursor", last.split()[-1]) if not last.endswith("(last page)") else ()
    assert sorted(seen) == sorted(dead) and lines[-2] == "1 of 5 dead job(s)" and not cursor, lines
    as_json = epochq(settings, "dlq", "list", "--limit", "2", "--json", *state)
    assert len(json.loads(as_json.stdout)) == 2 and "epochq: next-cursor: " in as_json.stderr, as_json
    refused = epochq(settings, "dlq", "list", "--limit", "5000", *state)
    assert refused.returncode == 2 and one_line(refused) == "epochq: error: limit: 5000 is not between 1 and 1000"

    typo = epochq(settings, "dlq", "list", "--tenant", "acm", *state)
    assert typo.returncode == 0 and "0 of 0 dead job(s)" in typo.stdout, typo
    assert ("epochq: --tenant 'acm' matched no dead job (filters match exactly); did you mean 'acme'? "
            "tenants seen: acme") in typo.stderr, typo.stderr
    jobs = epochq(settings, "jobs", "list", "--tenant", "ACME", "--type", "email.sen", *state)
    assert jobs.returncode == 0, jobs
    assert ("epochq: --tenant 'ACME' matched no job (filters match exactly); did you mean 'acme'? "
            "tenants seen: acme") in jobs.stderr, jobs.stderr
    assert "epochq: --type 'email.sen' matched no job (filters match exactly); did you mean 'email.send'? " \
        "task types seen: email.send" in jobs.stderr, jobs.stderr

    # a replay the owner refuses (the view read was stale: the job had been replayed meanwhile) says so, exit 1
    job_id = sorted(dead)[0]
    shutil.copytree(engine.state_dir, tmp_path / "stale")
    assert epochq(settings, "pause", "email.send").returncode == 0  # the replayed job waits, queued
    assert epochq(settings, "dlq", "replay", job_id, "--reason", "fixed", *state).returncode == 0
    again = epochq(settings, "dlq", "replay", job_id, "--reason", "again", "--state-dir", str(tmp_path / "stale"))
    assert again.returncode == 1, again
    assert f"epochq: job {job_id}: ReplayDeadJob refused in state queued: " in again.stderr, again.stderr
    assert "epochq: dlq replay: refused for 1 of 1 job(s)" in again.stderr
