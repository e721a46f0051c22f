"""Pausing a task type: the commands that stop and restart its starts in a partition, decided per partition. Pure.

A pause is namespace-wide by being sent to every partition: the client sends one
``PauseTaskType`` per partition, each under an envelope id that hashes to that partition
(``task_envelope``), and each owner records ``TaskTypePaused`` in its own log, so a rebuild
of any partition sees its pause. While paused, the partition's owner starts no job of the
task type: queued jobs wait (and keep their place), running ones finish, submits are admitted.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.contract import messages as m
from engine.contract.partitioner import partition_for
from engine.contract.validation import check_free_text, check_task_type

TASK_ENVELOPE = "tasktype:"
TASK_COMMANDS = (m.PauseTaskType, m.ResumeTaskType)


def task_envelope(task_type: str, partition: int, partitions: int, prefix: str = TASK_ENVELOPE) -> str:
    """The envelope id of a task-type command for ``partition``: the first ``<prefix><type>#<n>`` hashing there."""
    n = 0
    while partition_for(f"{prefix}{task_type}#{n}", partitions) != partition:
        n += 1
    return f"{prefix}{task_type}#{n}"


def is_task_command(command: m.Command) -> bool:
    """Whether a command pauses or resumes a task type (its "job" is the task type in one partition)."""
    return isinstance(command.body, TASK_COMMANDS)


def check_task_command(command: m.Command) -> None:
    """A pause or resume's fields, by the rules every command's are checked by; ValidationError naming one."""
    body = command.body
    assert isinstance(body, TASK_COMMANDS)
    check_task_fields(body)


def check_task_fields(body: m.PauseTaskType | m.ResumeTaskType | m.SetRateLimit | m.ClearRateLimit) -> None:
    """The fields every command on a task type has (pause, resume, rate limits): its type, why, by whom."""
    check_task_type(body.task_type)
    check_free_text("reason", body.reason)
    check_free_text("requested_by", body.requested_by)


def decide_pause(command: m.Command, paused: Callable[[str], bool]) -> m.EventBody:
    """The event of a pause or resume in this partition: the change, or a refusal when there is none to make."""
    body = command.body
    assert isinstance(body, TASK_COMMANDS)
    name, is_paused = type(body).__name__, paused(body.task_type)
    if isinstance(body, m.PauseTaskType):
        if is_paused:
            return m.CommandRefused(name, "paused", f"task type {body.task_type!r} is already paused")
        return m.TaskTypePaused(body.task_type, body.reason, body.requested_by)
    if not is_paused:
        return m.CommandRefused(name, "running", f"task type {body.task_type!r} is not paused")
    return m.TaskTypeResumed(body.task_type, body.reason, body.requested_by)
