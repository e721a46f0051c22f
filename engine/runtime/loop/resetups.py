"""Partitions set up again after their producer failed for good without a fence: the source of truth for how long
an owner waits before each new set-up.

A producer that keeps failing (a broker that keeps turning its transactions into fatal errors) would otherwise be
replaced at once every time: a new producer, a restore and a claim of a new epoch about twice a second, for as long
as it fails. So each set-up in a row waits longer than the one before, from ``FIRST_DELAY_S`` doubling up to
``MAX_DELAY_S``; a partition that stayed active ``STABLE_S`` before its producer failed starts a new series.
"""

from __future__ import annotations

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
STABLE_S = 60.0
"""How long a partition must have stayed active for the next failure to count as the first in a row."""


def in_a_row(previous: int, active_for_s: float) -> int:
    """Which set-up in a row this one is, after ``previous`` of them, for a partition active ``active_for_s`` seconds
    before its producer failed. Pure."""
    return 1 if active_for_s >= STABLE_S else previous + 1


def delay_s(in_a_row: int) -> float:
    """How long the ``in_a_row``-th set-up in a row waits before it starts. Pure."""
    return min(MAX_DELAY_S, FIRST_DELAY_S * float(2 ** max(0, min(in_a_row - 1, 16))))
