"""How the answers of every partition to a task type's command are counted: a refusal is never success."""

from __future__ import annotations

from engine.contract import messages as m
from engine.questions.logged import LoggedEvent
from engine.questions.outcome import Outcome
from engine.questions.tally import tally


def _answered(*bodies: m.EventBody) -> Outcome:
    outcome = Outcome("tasktype:echo#0")
    for n, body in enumerate(bodies):
        outcome.apply(LoggedEvent(n, m.Event(f"e{n}", outcome.job_id, None, 1, "o", 0, body)))
    return outcome


def test_a_refusal_of_the_signer_is_counted_apart_from_a_partition_already_paused() -> None:
    outcomes = [_answered(m.TaskTypePaused("echo", "", "")),
                _answered(m.CommandRefused("PauseTaskType", "paused", "task type 'echo' is already paused")),
                _answered(m.CommandRefused("PauseTaskType", "unknown", "unauthorized: an operator's command")),
                Outcome("tasktype:echo#3")]
    verdict = tally(outcomes)
    assert (verdict.total, verdict.changed, verdict.unchanged, verdict.undecided) == (4, 1, 1, 1)
    assert verdict.refused == "refused in 1 of 4 partition(s): unauthorized: an operator's command"


def test_nothing_to_change_is_no_refusal_for_each_command() -> None:
    answers = [("ResumeTaskType", "running"), ("SetRateLimit", "limited"), ("ClearRateLimit", "unlimited")]
    verdict = tally([_answered(m.CommandRefused(command, state, "nothing to do")) for command, state in answers])
    assert verdict.unchanged == 3 and verdict.refused is None
    wrong = tally([_answered(m.CommandRefused("ResumeTaskType", "paused", "odd"))])
    assert wrong.refused == "refused in 1 of 1 partition(s): odd"
