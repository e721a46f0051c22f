"""What a command sent to every partition came to: the source of truth for how the CLI and the console count the
partitions' answers to a task type's pause, resume or rate limit (changed, already so, refused, undecided).

A partition that had nothing to change answers with a ``CommandRefused`` too (``already paused``); only
:func:`engine.domain.tasktypes.unchanged` tells that answer from a refusal of the command itself (a tenant's
key, an unsigned command where signatures are required, a field out of its rules), which is never success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.contract import messages as m
from engine.domain.tasktypes import unchanged
from engine.questions.outcome import Outcome


@dataclass(frozen=True, slots=True)
class Tally:
    """How many partitions changed, were already as asked, refused (with why), or decided nothing in time."""

    total: int
    changed: int
    unchanged: int
    refusals: tuple[str, ...]
    undecided: int

    @property
    def refused(self) -> str | None:
        """One line saying a refusal happened (``refused in 6 of 6 partition(s): unauthorized: …``); None if none."""
        if not self.refusals:
            return None
        return f"refused in {len(self.refusals)} of {self.total} partition(s): {self.refusals[0]}"


def tally(outcomes: Sequence[Outcome]) -> Tally:
    """Count each partition's answer to one command per partition. Pure."""
    changed = kept = undecided = 0
    refusals: list[str] = []
    for outcome in outcomes:
        refusal = _refusal(outcome)
        if not outcome.events:
            undecided += 1
        elif refusal is None:
            changed += 1
        elif unchanged(refusal):
            kept += 1
        else:
            refusals.append(refusal.reason)
    return Tally(len(outcomes), changed, kept, tuple(refusals), undecided)


def _refusal(outcome: Outcome) -> m.CommandRefused | None:
    """The partition's refusal of the command, if its answer was one."""
    for logged in reversed(outcome.events):
        if isinstance(logged.event.body, m.CommandRefused) and not logged.fenced:
            return logged.event.body
    return None
