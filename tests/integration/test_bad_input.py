"""Bad input on a real broker: each is a clear, recorded rejection; the engine keeps running."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from engine.client import Client
from engine.commands import now_us
from engine.config import Settings
from engine.contract import messages as m
from engine.contract.codec import encode_command
from engine.contract.ids import new_command_id, new_job_id
from engine.contract.partitioner import partition_for
from engine.errors import ValidationError
from tests.integration.conftest import ROOT, eventually, start_engine
from tests.integration.helpers.raw import decided, job_events_eventually, partition_events, produce_raw


def test_bad_input_is_recorded_and_nothing_else_is_lost(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)

    producer = Producer({"bootstrap.servers": settings.require_bootstrap()})
    for raw in (b"not avro at all", b"\xc3\x01" + b"\x00" * 8 + b"junk", b""):
        producer.produce(settings.commands_topic, raw, b"garbage", partition=1)
    producer.flush(10)

    unknown = client.submit("no.such.task", {}, tenant="acme").wait(30)
    assert unknown.status == "rejected" and unknown.reason == "unknown_task_type"
    assert "no.such.task" in unknown.error

    too_big = submit_command(new_job_id(), payload=m.Payload(b"x" * (600 * 1024)))  # the client would refuse it
    produce_raw(settings, [too_big])
    (rejected,) = [e.body for e in decided(settings, too_big)]
    assert isinstance(rejected, m.JobRejected) and rejected.reason == "payload_too_large"

    invalid = client.submit("email.send", {"to": "a@b.c"}, tenant="acme").wait(30)
    assert invalid.status == "dead" and invalid.reason == "validation_failed" and invalid.attempts == 1
    assert "subject" in invalid.error

    fine = client.submit("email.send", {"to": "a@b.c", "subject": "hi"}, tenant="acme").wait(30)
    assert fine.status == "completed" and fine.result == {"sent_to": "a@b.c"}

    quarantined = [e.body for e in partition_events(settings, 1) if isinstance(e.body, m.CommandQuarantined)]
    assert len(quarantined) == 3
    assert {q.raw for q in quarantined} == {b"not avro at all", b"\xc3\x01" + b"\x00" * 8 + b"junk", b""}
    assert all(q.topic == settings.commands_topic and q.partition == 1 and q.error for q in quarantined)
    listed = json.loads(epochq(settings, "quarantine", "list", "--json", "--state-dir", str(engine.state_dir)).stdout)
    assert sorted((r["partition"], r["command_offset"], r["bytes"]) for r in listed) == sorted(
        (1, q.offset, len(q.raw)) for q in quarantined)
    assert all(r["error"] for r in listed)
    assert engine.proc.poll() is None


def submit_command(job_id: str, tenant: str = "acme", **fields: object) -> m.Command:
    body = m.SubmitJob(**{"task_type": "echo", "payload": m.Payload(b"{}"), **fields})  # type: ignore[arg-type]
    return m.Command(new_command_id(), job_id, tenant, now_us(), body)


def test_records_that_would_crash_later_steps_are_rejected_naming_the_field(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    bad = [
        ("run_at", submit_command(new_job_id(), run_at=-1_000_000)),  # crashed the dispatcher on every restart
        ("run_at", submit_command(new_job_id(), run_at=2**62)),
        ("job_id", submit_command("")),  # was admitted, then ignored by the fold: never ran, never ended
        ("job_id", submit_command("j" * 8000)),
        ("tenant_id", submit_command(new_job_id(), tenant="\u200f\u202eacme")),
        ("tenant_id", submit_command(new_job_id(), tenant="ac\x00me")),
        ("max_attempts", submit_command(new_job_id(), max_attempts=10**9)),
        ("priority", submit_command(new_job_id(), priority=-3)),
    ]
    later = client.submit("echo", {}, tenant="acme", delay=3600)
    reschedule = m.Command(new_command_id(), later.job_id, "acme", now_us(), m.RescheduleJob(-5))
    produce_raw(settings, [command for _, command in bad] + [reschedule])

    for field, command in bad:
        (rejected,) = [e.body for e in decided(settings, command)]
        reason = "invalid_tenant" if field == "tenant_id" else f"invalid_{field}"
        assert isinstance(rejected, m.JobRejected) and rejected.reason == reason, rejected
        assert rejected.detail.startswith(f"{field}: "), rejected
    (refused,) = [e.body for e in decided(settings, reschedule)]
    assert isinstance(refused, m.CommandRefused) and refused.reason.startswith("run_at: ")

    fine = client.submit("echo", {"v": 1}, tenant="acme").wait(30)
    assert fine.status == "completed" and fine.result["payload"] == {"v": 1}
    assert engine.proc.poll() is None and "Traceback" not in engine.logs()


def epochq(settings: Settings, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "engine.cli.main", *args, "--bootstrap", settings.require_bootstrap(),
           "--namespace", settings.namespace]
    return subprocess.run(cmd, cwd=ROOT, input=stdin.decode() if stdin else None, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("size", [2_000_000, 9_000_000])
def test_the_client_refuses_a_large_payload_before_producing_it(settings: Settings, client: Client, size: int) -> None:
    end = client._reader.end_offsets(settings.commands_topic, range(3))
    with pytest.raises(ValidationError) as caught:
        client.submit("echo", {"blob": "x" * size}, tenant="acme")
    assert caught.value.reason == "payload_too_large" and str(caught.value).startswith("payload: is ")
    assert client._reader.end_offsets(settings.commands_topic, range(3)) == end  # nothing produced


def test_the_cli_takes_large_payloads_from_a_file_or_stdin_and_says_what_is_wrong_in_one_line(  # type: ignore[no-untyped-def]
        settings: Settings, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    blob = '{"blob": "' + "x" * 300_000 + '"}'  # over the 128 KiB one argument can carry
    (tmp_path / "blob.json").write_text(blob)
    for flag, stdin in ((f"@{tmp_path / 'blob.json'}", None), ("-", blob.encode())):
        done = epochq(settings, "submit", "echo", "--tenant", "acme", "--payload", flag, "--wait", stdin=stdin)
        assert done.returncode == 0 and ": completed" in done.stdout, done.stderr

    (tmp_path / "huge.json").write_text('{"blob": "' + "x" * 3_000_000 + '"}')
    for args, words in ((("--payload", f"@{tmp_path / 'huge.json'}"), "payload: is 3,000,011 bytes"),
                        (("--payload", "@/no/such.json"), "payload: cannot read"),
                        (("--payload", "{oops"), "payload: the text given is not JSON"),
                        (("--delay", "-5"), "delay: must be a finite number of seconds >= 0"),
                        (("--run-at", "2026-13-01"), "run_at: '2026-13-01' is not a time: give +5m, in 2h"),
                        (("--run-at", "0001-01-01T00:00:00+00:00"), "run_at: 0001-01-01T00:00:00Z"),
                        (("--priority", "99"), "priority: must be 0-9"),
                        (("--tenant", " "), "tenant_id: must not start or end with a space")):
        failed = epochq(settings, "submit", "echo", "--tenant", "acme", *args)
        ours = [line for line in failed.stderr.splitlines() if not line.startswith("%")]  # not librdkafka's logs
        assert failed.returncode == 2 and failed.stdout == "", (args, failed)
        assert len(ours) == 1 and ours[0].startswith(f"epochq: error: {words}"), (args, failed.stderr)
    assert engine.proc.poll() is None


def test_a_record_produced_to_the_wrong_partition_is_found_by_its_job_id(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    command = submit_command(new_job_id())
    home = partition_for(command.job_id, 3)
    landed = (home + 1) % 3
    producer = Producer({"bootstrap.servers": settings.require_bootstrap(), "acks": "all"})
    producer.produce(settings.commands_topic, encode_command(command), command.job_id.encode(), partition=landed)
    assert producer.flush(10) == 0
    with Client(engine.settings(settings)) as reader:  # the engine's projections: the landed store's index
        outcome = eventually(lambda: (o := reader.status(command.job_id)).known and o, what="the job known")
        assert not reader.status(command.job_id, tenant="other").known  # another tenant still learns nothing
    assert outcome.status == "rejected" and outcome.reason == "wrong_partition", outcome
    assert f"belongs to partition {home}, not {landed}" in (outcome.error or "")
    assert not any(e.job_id == command.job_id for e in partition_events(settings, home))  # nothing written there

    state = ("--state-dir", str(engine.state_dir))
    status = json.loads(epochq(settings, "status", command.job_id, "--json", *state).stdout)
    assert (status["status"], status["reason"]) == ("rejected", "wrong_partition")
    history = json.loads(epochq(settings, "history", command.job_id, "--json", *state).stdout)
    assert [row["type"] for row in history] == ["JobRejected"]
    shown = epochq(settings, "history", command.job_id, *state).stdout.splitlines()[-1]
    assert f"JobRejected  reason=wrong_partition: job {command.job_id} belongs to partition {home}, not {landed}" \
        in shown, shown
    assert not client.status(command.job_id).known  # without the landed partition's store: not found (no scans)


def test_oversized_ids_a_deep_payload_and_an_absurd_rate_are_refused_naming_the_field(  # type: ignore[no-untyped-def]
        settings: Settings, client: Client, engines, tmp_path: Path) -> None:
    """issue 22: 700 KB ids were copied into two events each, a 100k-deep payload was retried, a rate of
    1e-300 went down the poison path."""
    from engine.domain.ratelimits import limit_envelope

    engine = start_engine(engines, settings, "solo", tmp_path)
    engine.wait_active(3)
    huge = "x" * 700 * 1024
    for field in ("correlation_id", "command_id"):  # the client refuses before producing
        with pytest.raises(ValidationError) as info:
            client._send([dataclasses.replace(submit_command(new_job_id()), **{field: huge})])
        assert info.value.field == field and str(info.value).startswith(f"{field}: is 716,800 characters long")
    with pytest.raises(ValidationError, match="^correlation_id: is 716,800 characters"):
        client.submit("echo", {}, tenant="acme", correlation_id=huge)
    with pytest.raises(ValidationError, match="^rate: must be from 1/d"):
        client.set_rate_limit("echo", 1e-300)

    correlated = dataclasses.replace(submit_command(new_job_id()), correlation_id=huge)
    identified = dataclasses.replace(submit_command(new_job_id()), command_id=huge)
    rate = m.Command(new_command_id(), limit_envelope("echo", 0, 3), "", now_us(), m.SetRateLimit("echo", 1e-300))
    produce_raw(settings, [correlated, identified, rate])

    for command, field in ((correlated, "correlation_id"), (identified, "command_id")):
        events = job_events_eventually(settings, command.job_id)
        assert [type(e.body) for e in events] == [m.JobRejected], events
        (rejected,) = events
        assert rejected.body.reason == f"invalid_{field}", rejected
        assert rejected.body.detail.startswith(f"{field}: is 716,800 characters long, at most 255 allowed in a "
                                               "SubmitJob"), rejected
        assert huge not in (rejected.causation_id or "") + (rejected.correlation_id or "")  # not copied
        outcome = client.status(command.job_id)
        assert (outcome.status, outcome.reason) == ("rejected", f"invalid_{field}")
    (refused,) = decided(settings, rate)
    assert isinstance(refused.body, m.CommandRefused) and refused.body.reason.startswith("rate: must be from 1/d")

    deep = client.submit("echo", m.Payload(b"[" * 100_000 + b"]" * 100_000), tenant="acme").wait(30)
    assert (deep.status, deep.reason, deep.attempts) == ("dead", "validation_failed", 1), deep
    assert "nested too deeply" in (deep.error or "")

    fine = client.submit("echo", {"v": 1}, tenant="acme").wait(30)
    assert fine.status == "completed"
    assert engine.proc.poll() is None and "Traceback" not in engine.logs()
    assert "setting it aside" not in engine.logs()  # nothing went down the poison path
