"""The admission rules (engine/contract/validation.py): each names its field; the edges of each range."""

from __future__ import annotations

import pytest

from engine.contract import messages as m
from engine.contract.ids import job_id_for_key
from engine.contract.validation import (
    MAX_AHEAD_US, MAX_ATTEMPTS, SUBMIT_LANES, check_delay, check_job_command, check_labels, check_lane,
    check_name, check_payload, check_priority, check_run_at, check_schedule_command, check_scope, check_submit,
)
from engine.domain.lanes import RUNNABLE_LANES
from engine.errors import ValidationError
from tests.unit.factories import command, submit

NOW = 1_800_000_000_000_000


def problem(fn, *args) -> ValidationError:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError) as caught:
        fn(*args)
    return caught.value


@pytest.mark.parametrize(("value", "words"), [
    ("", "must not be empty"),
    ("x" * 201, "201 characters long"),
    ("a\x00b", "control character"),
    ("\u200facme", "non-printable character (Unicode Cf)"),  # a right-to-left mark
    ("a\u2028b", "non-printable character (Unicode Zl)"),
    ("no\u00a0break", "non-printable character (Unicode Zs)"),
    (" acme", "must not start or end with a space"),
    ("acme ", "must not start or end with a space"),
    (b"acme", "must be a string, got bytes"),
])
def test_a_bad_name_is_refused_with_its_field_named(value: object, words: str) -> None:
    error = problem(check_name, "tenant_id", value)
    assert str(error).startswith("tenant_id: ") and words in str(error)
    assert error.field == "tenant_id" and error.reason == "invalid_tenant"


def test_names_may_hold_any_printable_character() -> None:
    assert check_name("task_type", "email.send/v2 ü 😀 a:b") == "email.send/v2 ü 😀 a:b"
    assert check_name("task_type", "x" * 200) == "x" * 200


def test_run_at_from_1970_to_100_years_ahead() -> None:
    assert check_run_at(None, NOW) is None
    assert check_run_at(0, NOW) == 0  # the past means now, 1970 included
    assert check_run_at(NOW + MAX_AHEAD_US, NOW) == NOW + MAX_AHEAD_US
    before = problem(check_run_at, -1, NOW)
    assert before.reason == "invalid_run_at" and "1969-12-31T23:59:59.999999Z (-1 µs) is before 1970" in str(before)
    assert "more than 100 years ahead" in str(problem(check_run_at, NOW + MAX_AHEAD_US + 1, NOW))
    assert "must be an integer" in str(problem(check_run_at, 1.5, NOW))
    assert "-9223372036854775808 µs is before" in str(problem(check_run_at, -2**63, NOW))  # no datetime for it


@pytest.mark.parametrize("seconds", [-5, -0.001, float("nan"), float("inf"), 1e300, True, "5"])
def test_a_negative_or_absurd_delay_is_refused(seconds: object) -> None:
    assert str(problem(check_delay, seconds)).startswith("delay: ")


def test_delays_from_zero_to_100_years_pass() -> None:
    assert check_delay(0) == 0.0 and check_delay(2.5) == 2.5 and check_delay(MAX_AHEAD_US / 1e6) > 0


def test_priority_lane_scope_labels() -> None:
    assert [check_priority(p) for p in (0, 9)] == [0, 9]
    for bad in (-1, 10, True, 5.0):
        assert problem(check_priority, bad).field == "priority"
    assert check_lane("batch") == "BATCH" and check_lane(None) is None and check_lane("") is None
    assert "dead-letter queue" in str(problem(check_lane, "dead"))
    assert check_scope("product:pro") == "product:pro" and check_scope("global") == "global"
    for bad in ("product:", "product: x", "everyone", 3):
        assert problem(check_scope, bad).reason == "invalid_scope"
    assert check_labels({"schedule": "s-1", "note": ""}) == {"schedule": "s-1", "note": ""}
    for bad in ({"": "x"}, {"k": "line\nbreak"}, {f"k{i}": "" for i in range(65)}, ["k"]):
        assert problem(check_labels, bad).field == "labels"


def test_every_lane_a_job_may_ask_for_is_a_runnable_lane() -> None:
    assert set(SUBMIT_LANES) == {lane.value for lane in RUNNABLE_LANES}


def test_payload_size_is_the_data_only_and_its_reason_is_payload_too_large() -> None:
    assert check_payload(m.Payload(b"x" * 10), 10).data == b"x" * 10
    error = problem(check_payload, m.Payload(b"x" * 11), 10)
    assert error.reason == "payload_too_large"
    assert str(error) == "payload: is 11 bytes; the limit is 10 (max_payload_bytes)"
    assert problem(check_payload, m.Payload(b"{}", ""), 10).field == "payload.content_type"


@pytest.mark.parametrize(("cmd", "field"), [
    (submit(""), "job_id"),
    (submit("x" * 256), "job_id"),
    (submit("schedule:nightly"), "job_id"),
    (submit(tenant="ac\x1fme"), "tenant_id"),
    (submit(task_type=""), "task_type"),
    (submit(priority=10), "priority"),
    (submit(run_at=-1), "run_at"),
    (submit(lane="nope"), "lane"),
    (submit(max_attempts=0), "max_attempts"),
    (submit(max_attempts=MAX_ATTEMPTS + 1), "max_attempts"),
    (submit(key="order-42"), "job_id"),  # not the id derived from the key
    (submit(job_id_for_key("acme", "order-42"), key="k" * 1001), "idempotency_key"),
])
def test_submit_names_the_first_field_at_fault(cmd: m.Command, field: str) -> None:
    error = problem(check_submit, cmd, NOW, 512 * 1024)
    assert error.field == field and str(error).startswith(f"{field}: ")


def test_a_valid_submit_passes_with_the_derived_id() -> None:
    cmd = submit(job_id_for_key("acme", "order-42"), key="order-42", run_at=NOW + 5)
    assert check_submit(cmd, NOW, 512 * 1024) is cmd.body


def test_other_job_commands() -> None:
    assert check_job_command(command("job-1", m.CancelJob("why"), tenant=""), NOW)  # tenant may be unknown
    assert problem(check_job_command, command("", m.CancelJob()), NOW).field == "job_id"
    assert problem(check_job_command, command("job-1", m.RescheduleJob(-5)), NOW).field == "run_at"
    assert problem(check_job_command, command("job-1", m.ReplayDeadJob("x" * 1001)), NOW).field == "reason"
    report = m.ReportChild("job-1", "child-1", "acme", "exploded")
    assert problem(check_job_command, command("job-1", report), NOW).field == "status"


def test_schedule_commands_name_their_schedule_field() -> None:
    assert check_schedule_command(command("schedule:s", m.PauseSchedule("s")))
    assert problem(check_schedule_command, command("schedule:", m.PauseSchedule(""))).field == "schedule_id"
    assert problem(check_schedule_command, command("schedule:s", m.PauseSchedule("s"), tenant=" x")).field \
        == "tenant_id"
