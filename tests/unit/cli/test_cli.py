"""The CLI's handling of careless input, without a broker: one line on stderr, a status that says why."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import pytest

from engine.cli import main as cli
from engine.cli.common import parse_time, read_payload
from engine.client import Outcome, _submit_kwargs
from engine.contract import messages as m
from engine.errors import ValidationError
from engine.questions.history import LoggedEvent
from engine.runtime.topics import TopicInfo, check_asked
from engine.config import load_settings
from engine.errors import TopicMismatchError
from tests.unit.factories import event


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    status = cli.main(list(argv))
    return status, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("text", ["{bad json}", "", "[1,"])
def test_a_payload_that_is_not_json_names_the_flag(text: str) -> None:
    with pytest.raises(ValidationError, match="^payload: the text given is not JSON"):
        read_payload(text)


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "in a bit"])
def test_a_run_at_that_is_not_a_time_names_the_flag(text: str) -> None:
    with pytest.raises(ValidationError, match=rf"^run_at: '{text}' is not a time: give \+5m, in 2h \(from now\) or "):
        parse_time(text, "run_at")


@pytest.mark.parametrize(("text", "seconds"), [("+5m", 300), ("in 2h", 7200), ("+30s", 30), ("+1.5d", 129600),
                                               ("IN 10 min", 600), ("2026-06-01T12:00:05+00:00", 5)])
def test_run_at_takes_a_time_from_now_or_an_iso_time(text: str, seconds: int) -> None:
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    assert parse_time(text, "run_at", now) == now + timedelta(seconds=seconds)


@pytest.mark.parametrize(("job", "named"), [
    ({"task_type": "x", "tenant": "a", "bogus": 1}, "unknown key(s) 'bogus'"),
    ({"task_type": "x", "tenant": "a", "job_id": "j"}, "unknown key(s) 'job_id'"),
    ({"task_type": "x"}, "missing key(s) 'tenant'"),
    ({"tenant": "a"}, "missing key(s) 'task_type'"),
])
def test_a_bad_key_of_submit_many_is_named_without_private_names(job: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _submit_kwargs(job)
    assert str(caught.value).startswith(named)
    assert "_submit" not in str(caught.value)


def test_submit_many_keys_default_the_payload() -> None:
    assert _submit_kwargs({"task_type": "x", "tenant": "a"}) == {"payload": None, "task_type": "x", "tenant": "a"}


def test_dlq_replay_without_a_target_needs_all(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(capsys, "dlq", "replay", "--reason", "oops")
    assert status == 2 and len(err) == 1 and "--all" in err[0] and err[0].startswith("epochq: error: ")
    status, err = run(capsys, "dlq", "replay", "some-job", "--all", "--reason", "oops")
    assert status == 2 and "--all replays everything" in err[0]


def test_an_unexpected_exception_is_one_line_and_status_70(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise ValueError("Expected non-empty list of ConfigResource objects")
    monkeypatch.setattr("engine.cli.tenants._list", boom)
    status, err = run(capsys, "tenants", "list")
    assert status == cli.EXIT_INTERNAL and len(err) == 1
    assert err[0].startswith("epochq: error: internal error: ValueError: Expected non-empty")


@pytest.mark.parametrize("argv", [["console", "--port", "99999"], ["console", "--port", "-1"],
                                  ["engine", "run", "app:app", "--console-port", "70000"],
                                  ["engine", "run", "app:app", "--metrics-port", "0x50"]])
def test_a_port_out_of_range_is_a_usage_error_naming_the_range(capsys: pytest.CaptureFixture[str],
                                                                argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"{argv[-2]}: expected a port from 1 to 65535, got "
                                                            f"{argv[-1]!r}")


def test_asked_partitions_and_replication_must_match_existing_topics() -> None:
    settings = load_settings(bootstrap="127.0.0.1:1", namespace="ns")
    infos = [TopicInfo("ns.commands", 6, 1, {}), TopicInfo("ns.events", 6, 1, {}), TopicInfo("ns.tenants", 1, 1, {})]
    check_asked(settings, infos, None, None)
    check_asked(settings, infos, 6, 1)  # the tenants topic always has one partition
    with pytest.raises(TopicMismatchError, match="ns.commands has 6 partitions, not 3; ns.events has 6"):
        check_asked(settings, infos, 3, None)
    with pytest.raises(TopicMismatchError, match="ns.tenants has replication 1, not 3"):
        check_asked(settings, infos, None, 3)


def logged(body: m.EventBody) -> LoggedEvent:
    return LoggedEvent(0, event(body), False)


def test_an_outcome_knows_the_due_time_of_a_waiting_job() -> None:
    outcome = Outcome("job-1", status="unknown")
    assert not outcome.known
    for body, due in ((m.JobScheduled(5_000_000), 5_000_000), (m.JobRescheduled(7_000_000), 7_000_000),
                      (m.JobQueued("due"), 7_000_000), (m.JobRetryScheduled(2, 9_000_000), 9_000_000)):
        outcome.apply(logged(body))
        assert outcome.due_at == due
    assert outcome.known and outcome.status == "retrying"


def test_freshness_names_missing_partitions_and_those_behind_the_log() -> None:
    from engine.cli.fresh import freshness

    settings = load_settings(bootstrap="127.0.0.1:1", namespace="ns", state_dir="/state")
    ends = {0: 10, 1: 20, 2: 30}
    assert freshness(settings, {0: 8, 1: 18, 2: 28}, ends) == \
        "from the view in /state: 3 of 3 partition(s); up to date"  # one commit marker after each
    line = freshness(settings, {0: 8, 2: 5}, ends)
    assert line == ("from the view in /state: 2 of 3 partition(s); partition(s) 1 not here, their jobs are "
                    "left out; behind the log: partition 2 by 24 record(s)")
    assert "could not be read" in freshness(settings, {0: 8}, {})


@pytest.mark.parametrize("argv", [("status", "some-job"), ("submit", "x", "--tenant", "a"), ("topics", "describe"),
                                  ("tenants", "list"), ("history", "some-job")])
def test_an_unreachable_broker_is_one_line_naming_the_address_and_status_3(argv: tuple[str, ...]) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "engine.cli.main", *argv, "--bootstrap", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 3, run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("epochq: error: cannot reach Kafka at 127.0.0.1:1: "
                                                        "connection refused"), run.stderr
    assert "%3|" not in run.stderr


def test_history_names_the_trace_and_the_span_of_what_an_attempt_decided(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from engine.cli import jobs

    submitter = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    attempt = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
    events = [LoggedEvent(0, event(m.JobSubmitted("x", m.Payload(b"{}"), 5, "NORMAL", 1, traceparent=submitter)),
                          traceparent=submitter),
              LoggedEvent(1, event(m.JobSucceeded(1, 10)), traceparent=attempt)]
    monkeypatch.setattr(jobs, "job_history", lambda *a: events)
    monkeypatch.setattr(jobs, "settings_from", lambda args: None)
    jobs._history(argparse.Namespace(job_id="job-1", tenant=None, json=False))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "trace 0af7651916cd43dd8448eb211c80319c"
    assert "[span" not in lines[2] and lines[3].endswith("JobSucceeded  [span 00f067aa0ba902b7]")


@pytest.mark.parametrize(("flags", "named"), [
    (["--partitions", "100000000"], "--partitions: must be from 1 to 1024, got 100000000"),
    (["--partitions", "0"], "--partitions: must be from 1 to 1024, got 0"),
    (["--slots", "NORMAL=10000000"], "--slots: NORMAL=10000000: must be a whole number of slots from 0 to 100000"),
    (["--slots", "NORMAL=2.5"], "--slots: NORMAL=2.5: must be a whole number of slots from 0 to 100000"),
    (["--weight", "acme=inf"], "--weight: acme=inf: must be a number from 1e-06 to 1e+06"),
    (["--weight", "acme=0"], "--weight: acme=0: must be a number from 1e-06 to 1e+06"),
    (["--rate", "send=2000000/s"], "--rate: send=2000000/s: must be from 1/d"),
    (["--priority", "send=12"], "--priority: send=12: "),
    (["--since", "1h", "--until", "2h"], "--until: must be after --since"),
])
def test_every_simulate_input_is_bounded_before_anything_is_read(capsys: pytest.CaptureFixture[str],
                                                                  flags: list[str], named: str) -> None:
    status, err = run(capsys, "simulate", "--bootstrap", "127.0.0.1:1", *flags)  # nothing listens there
    assert status == 2 and len(err) == 1 and err[0].startswith(f"epochq: error: {named}"), err


def test_an_engine_whose_every_task_type_goes_to_a_pool_decides_only() -> None:
    from engine.cli.catalog import decides_only
    from engine.contract.heartbeat import WorkerRow

    def row(**kw: object) -> WorkerRow:
        return WorkerRow(instance="e1", host="h", pid=1, started_at_us=0, seen_at_us=0, partitions=[], slots=[],
                         running=[], **kw)  # type: ignore[arg-type]

    assert decides_only(row(task_types=["a", "b"], pools={"a": "gpu", "b": "default"}))
    assert not decides_only(row(task_types=["a", "b"], pools={"a": "gpu"}))  # b runs here
    assert not decides_only(row(task_types=["a"], pools={"a": "gpu"}, pool="gpu"))  # a worker
    assert not decides_only(row(task_types=None))  # an engine that predates task types
