"""Every string of every command has a bound, checked first, naming the field and the command."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from engine.contract import messages as m
from engine.contract.bounds import BODIES, ENVELOPE, MAX_ID_LENGTH, PAYLOAD, check_bounds
from engine.domain.ratelimits import check_limit_command, check_rate, parse_rate
from engine.errors import ValidationError
from tests.unit.factories import command, submit

LONG = "x" * 700 * 1024


def string_fields(cls: type) -> set[str]:
    """The fields of a message class whose type holds ``str`` (``str``, ``str | None``)."""
    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls) if str in (typing.get_args(hints[f.name]) or (hints[f.name],))}


def test_every_string_field_of_every_command_has_a_bound() -> None:
    assert string_fields(m.Command) - {"tenant_id"} == {name for name, _ in ENVELOPE}
    assert string_fields(m.Payload) == {name for name, _ in PAYLOAD}
    for name, cls in m.COMMAND_BODIES.items():
        labels = {"labels", "depends_on"} if cls is m.SubmitJob else set()  # keys and values: bounded apart
        assert string_fields(cls) - labels == {field for field, _ in BODIES[cls]}, name


@pytest.mark.parametrize("field", ["command_id", "correlation_id", "job_id", "tenant_id"])
def test_an_envelope_id_over_its_bound_is_refused_naming_it_and_the_command(field: str) -> None:
    cmd = dataclasses.replace(submit(), **{field: LONG})
    with pytest.raises(ValidationError) as info:
        check_bounds(cmd)
    assert str(info.value).startswith(f"{field}: is 716,800 characters long, at most ")
    assert str(info.value).endswith("allowed in a SubmitJob") and info.value.field == field
    assert len(str(info.value)) < 200


def test_at_the_bound_passes_and_one_over_does_not() -> None:
    ok = dataclasses.replace(submit(), correlation_id="c" * MAX_ID_LENGTH, command_id="i" * MAX_ID_LENGTH)
    assert check_bounds(ok) is ok
    with pytest.raises(ValidationError, match="^correlation_id: is 256 characters"):
        check_bounds(dataclasses.replace(ok, correlation_id="c" * (MAX_ID_LENGTH + 1)))


@pytest.mark.parametrize(("body", "field"), [
    (m.CancelJob(reason=LONG), "reason"),
    (m.ReplayDeadJob(requested_by=LONG), "requested_by"),
    (m.ReportChild("p", "c", "acme", "dead", LONG), "error"),
    (m.UpsertSchedule("s", "acme", "echo", LONG, m.Payload(b"{}")), "cron"),
    (m.UpsertSchedule("s", "acme", "echo", "* * * * *", m.Payload(b"{}"), timezone=LONG), "timezone"),
    (m.UpsertSchedule("s", "acme", "echo", "* * * * *", m.Payload(b"{}", LONG)), "payload.content_type"),
    (m.ReportOccurrence("s", 0, LONG, "completed"), "job_id"),
    (m.SetRateLimit(LONG, 1.0), "task_type"),
    (m.SubmitJob("echo", m.Payload(b"{}"), labels={"k": LONG}), "labels"),
])
def test_a_body_field_over_its_bound_is_refused_naming_it(body: m.CommandBody, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_bounds(command("job-1", body))
    assert str(info.value).startswith(f"{field}: ") and info.value.field == field
    assert f"in a {type(body).__name__}" in str(info.value) and len(str(info.value)) < 300


def test_a_value_of_another_type_is_left_to_the_finer_rules() -> None:
    cmd = command("job-1", m.CancelJob(reason=7))  # type: ignore[arg-type]
    assert check_bounds(cmd) is cmd


@pytest.mark.parametrize("rate", [1e-300, 0.0, -1.0, 1e-6, 2e6, float("nan")])
def test_a_rate_outside_one_a_day_to_a_million_a_second_is_refused_naming_it(rate: float) -> None:
    with pytest.raises(ValidationError) as info:
        check_limit_command(command("ratelimit:echo#0", m.SetRateLimit("echo", rate)))
    assert info.value.field == "rate" and str(info.value).startswith("rate: ")


def test_the_sane_range_of_rates_passes() -> None:
    assert check_rate(1 / 86_400) == pytest.approx(1 / 86_400)
    assert parse_rate("1/d") == pytest.approx(1 / 86_400) and parse_rate("1000000/s") == 1e6
    with pytest.raises(ValidationError, match="^rate: must be from 1/d"):
        parse_rate("0.5/d")


def test_a_payload_that_is_no_payload_is_left_to_the_finer_rules() -> None:
    cmd = command("job-1", m.SubmitJob("echo", None))  # type: ignore[arg-type]
    assert check_bounds(cmd) is cmd


def test_dependencies_over_their_bounds_name_the_field() -> None:
    import pytest

    from engine.errors import ValidationError

    many = m.SubmitJob("t", m.Payload(b"{}"), depends_on={f"j{i}": "run" for i in range(10_001)})
    with pytest.raises(ValidationError, match=r"^depends_on: 10,001 dependencies, at most 10,000 allowed"):
        check_bounds(m.Command("c", "j", "acme", 0, many))
    long = m.SubmitJob("t", m.Payload(b"{}"), depends_on={"j" * 300: "run"})
    with pytest.raises(ValidationError, match=r"^depends_on: dependency 'jjj"):
        check_bounds(m.Command("c", "j", "acme", 0, long))
