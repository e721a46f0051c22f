"""The lifecycle table: every allowed transition, and forbidden ones refused by name."""

from __future__ import annotations

import itertools

import pytest

from engine.domain.lifecycle import TRANSITIONS, JobState, Trigger, allows, next_state
from engine.errors import InvalidTransitionError


@pytest.mark.parametrize(("state", "trigger"), list(TRANSITIONS))
def test_every_allowed_transition(state: JobState | None, trigger: Trigger) -> None:
    assert next_state(state, trigger) is TRANSITIONS[(state, trigger)]


FORBIDDEN = [
    (s, t) for s, t in itertools.product([None, *JobState], Trigger) if (s, t) not in TRANSITIONS
]


@pytest.mark.parametrize(("state", "trigger"), FORBIDDEN[::3])
def test_forbidden_transition_names_state_and_trigger(state: JobState | None, trigger: Trigger) -> None:
    with pytest.raises(InvalidTransitionError) as info:
        next_state(state, trigger)
    assert info.value.trigger == trigger.value
    assert info.value.state == (state.value if state else "new")
    assert trigger.value in str(info.value)


def test_final_states_allow_nothing_but_replay_or_purge_of_dead() -> None:
    for trigger in Trigger:
        assert not allows(JobState.COMPLETED, trigger)
        assert not allows(JobState.CANCELLED, trigger)
        assert allows(JobState.DEAD, trigger) == (trigger in (Trigger.REPLAY, Trigger.CANCEL))  # replay or purge


def test_a_running_job_is_asked_to_stop_before_it_is_cancelled() -> None:
    assert next_state(JobState.RUNNING, Trigger.REQUEST_CANCEL) is JobState.RUNNING
    assert next_state(JobState.RUNNING, Trigger.CANCEL) is JobState.CANCELLED
    assert next_state(JobState.FAILED, Trigger.CANCEL) is JobState.CANCELLED
    with pytest.raises(InvalidTransitionError, match="queued"):
        next_state(JobState.QUEUED, Trigger.REQUEST_CANCEL)
