"""Commands on a task type as a whole — pause, resume, set or clear its rate limit — decided per partition. Pure.

A pause and a rate limit work the same way (``engine.domain.pauses``, ``engine.domain.ratelimits``
hold what differs): the client sends one command per partition, under an envelope id that hashes
there (``tasktype:<type>#<n>``, ``ratelimit:<type>#<n>``); each owner checks it, decides it against
what its partition holds now (the change, or a refusal when there is none to make) and records
the event in its own log, so a rebuild of any partition sees it; dispatch reads it.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.contract import messages as m
from engine.domain.pauses import TASK_COMMANDS, TASK_ENVELOPE, check_task_command, decide_pause, task_envelope
from engine.domain.ratelimits import (
    LIMIT_COMMANDS, LIMIT_ENVELOPE, Bucket, check_limit_command, decide_limit, shown_rate,
)
from engine.errors import ValidationError

TaskTypeBody = m.PauseTaskType | m.ResumeTaskType | m.SetRateLimit | m.ClearRateLimit


def envelope(body: TaskTypeBody, partition: int, partitions: int) -> str:
    """The envelope id of ``body``'s command for ``partition`` (of ``partitions``)."""
    prefix = TASK_ENVELOPE if isinstance(body, TASK_COMMANDS) else LIMIT_ENVELOPE
    return task_envelope(body.task_type, partition, partitions, prefix)


def check(command: m.Command) -> None:
    """The command's fields, by the rules every command's are checked by; ValidationError naming one."""
    if isinstance(command.body, TASK_COMMANDS):
        check_task_command(command)
    else:
        check_limit_command(command)


def decide(command: m.Command, paused: Callable[[str], bool], bucket: Callable[[str], Bucket | None],
           partitions: int) -> m.EventBody:
    """The event of the command in this partition: the change, or a refusal (a field out of its rules, or
    nothing to change)."""
    try:
        check(command)
        if isinstance(command.body, LIMIT_COMMANDS):
            return decide_limit(command, bucket, partitions)
        return decide_pause(command, paused)
    except ValidationError as e:
        return m.CommandRefused(type(command.body).__name__, "unknown", str(e))


UNCHANGED_STATE = {"PauseTaskType": "paused", "ResumeTaskType": "running", "SetRateLimit": "limited",
                   "ClearRateLimit": "unlimited"}
"""The state a partition answers a task type's command with when the change is already in place."""


def unchanged(refused: m.CommandRefused) -> bool:
    """Whether a refusal of a task type's command only says there was nothing to change (already paused, no
    rate limit to clear): the partition is as asked. Any other refusal (the signer's powers, a field out of
    its rules) is a refusal."""
    return UNCHANGED_STATE.get(refused.command) == refused.state


def changed(body: m.EventBody) -> str | None:
    """What a change decided for a task type did, for the owner's log (None: a refusal)."""
    if isinstance(body, m.TaskTypePaused):
        return f"task type {body.task_type} paused"
    if isinstance(body, m.TaskTypeResumed):
        return f"task type {body.task_type} resumed"
    if isinstance(body, m.RateLimitSet):
        return f"task type {body.task_type} limited to {shown_rate(body.rate)}"
    if isinstance(body, m.RateLimitCleared):
        return f"task type {body.task_type}: rate limit cleared"
    return None
