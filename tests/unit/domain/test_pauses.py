"""Pausing a task type: envelopes that land in each partition, the decision, the fold, and what dispatch reads."""

from __future__ import annotations

import pytest

from engine.contract import messages as m
from engine.contract.partitioner import partition_for
from engine.domain.pauses import check_task_command, decide_pause, is_task_command, task_envelope
from engine.errors import ValidationError
from projections.views.pauses import all_paused, fold_pause, is_paused
from tests.unit.factories import command, event
from tests.unit.fakes import Reader


@pytest.mark.parametrize("partitions", [1, 3, 6, 32])
def test_each_partition_gets_an_envelope_that_hashes_to_it(partitions: int) -> None:
    envelopes = [task_envelope("email.send", p, partitions) for p in range(partitions)]
    assert [partition_for(e, partitions) for e in envelopes] == list(range(partitions))
    assert len(set(envelopes)) == partitions and all(e.startswith("tasktype:email.send#") for e in envelopes)


def test_pause_then_resume_and_refusals_without_a_change() -> None:
    reader, env = Reader(), task_envelope("email.send", 0, 1)
    paused = lambda task_type: is_paused(reader, task_type)  # noqa: E731
    pause = command(env, m.PauseTaskType("email.send", "smtp down", "ops"))
    assert is_task_command(pause)
    body = decide_pause(pause, paused)
    assert body == m.TaskTypePaused("email.send", "smtp down", "ops")
    assert fold_pause(reader, event(body, env, at=42)) and is_paused(reader, "email.send")
    assert not is_paused(reader, "report.build")
    assert [(r.task_type, r.since, r.reason) for r in all_paused(reader)] == [("email.send", 42, "smtp down")]
    again = decide_pause(pause, paused)
    assert isinstance(again, m.CommandRefused) and "already paused" in again.reason
    resumed = decide_pause(command(env, m.ResumeTaskType("email.send")), paused)
    assert resumed == m.TaskTypeResumed("email.send") and fold_pause(reader, event(resumed, env))
    assert not is_paused(reader, "email.send") and all_paused(reader) == []
    refused = decide_pause(command(env, m.ResumeTaskType("email.send")), paused)
    assert isinstance(refused, m.CommandRefused) and "not paused" in refused.reason
    assert not fold_pause(reader, event(m.JobQueued("due")))


def test_a_bad_task_type_is_named() -> None:
    with pytest.raises(ValidationError, match="^task_type"):
        check_task_command(command("tasktype:x#0", m.PauseTaskType(" padded ")))
