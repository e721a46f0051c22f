"""The command table (engine/domain/commands.py): every command has a route and a sender, and the
groups other modules act on are read off it. No broker."""

from __future__ import annotations

import typing

import pytest

from engine.contract import messages as m
from engine.domain import authority, tasktypes
from engine.domain.commands import COMMANDS, Route, Sender, route_of, sent_by, taking
from engine.domain.pauses import TASK_COMMANDS
from engine.domain.ratelimits import LIMIT_COMMANDS
from engine.domain.schedules import SCHEDULE_COMMANDS
from engine.errors import ValidationError
from engine.runtime.signatures import INTERNAL_COMMANDS


def test_every_command_body_has_exactly_one_row() -> None:
    assert set(COMMANDS) == set(typing.get_args(m.CommandBody))


def test_the_groups_other_modules_use_are_the_tables() -> None:
    assert set(SCHEDULE_COMMANDS) == set(taking(Route.SCHEDULE))
    assert set(TASK_COMMANDS) | set(LIMIT_COMMANDS) == set(taking(Route.TASK_TYPE))
    engine_only = {m.ReportChild, m.ReportOccurrence, m.AwaitJob, m.ReportDependency}
    assert set(INTERNAL_COMMANDS) == set(sent_by(Sender.ENGINE)) == engine_only
    assert set(authority.OPERATOR_COMMANDS) == set(sent_by(Sender.OPERATOR))
    assert set(authority.SCHEDULE_COMMANDS) == set(taking(Route.SCHEDULE)) - set(sent_by(Sender.ENGINE))


def test_a_command_goes_where_its_row_says() -> None:
    pause = m.Command("c1", "tasktype:echo#0", "", 0, m.PauseTaskType("echo"))
    cancel = m.Command("c2", "job-1", "acme", 0, m.CancelJob())
    assert route_of(pause) is Route.TASK_TYPE and route_of(cancel) is Route.JOB


@pytest.mark.parametrize("body", [m.PauseTaskType("echo"), m.ResumeTaskType("echo"), m.SetRateLimit("echo", 10.0, 1),
                                  m.ClearRateLimit("echo")])
def test_pauses_and_rate_limits_share_one_envelope_rule_and_one_check(body: tasktypes.TaskTypeBody) -> None:
    ids = {tasktypes.envelope(body, p, 6) for p in range(6)}
    assert len(ids) == 6 and all("echo#" in i for i in ids)
    tasktypes.check(m.Command("c", ids.pop(), "", 0, body))
    bad = m.Command("c", "x", "", 0, type(body)(*(["x" * 201] + list(_rest(body)))))
    with pytest.raises(ValidationError):
        tasktypes.check(bad)
    refused = tasktypes.decide(bad, lambda t: False, lambda t: None, 6)
    assert isinstance(refused, m.CommandRefused) and "task_type" in refused.reason


def _rest(body: tasktypes.TaskTypeBody) -> list[object]:
    values = [getattr(body, f) for f in body.__dataclass_fields__]
    return values[1:]
