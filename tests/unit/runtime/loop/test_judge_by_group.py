"""The apply step judges a failed transaction by its error's group (engine/errors.py), not by its class."""

from __future__ import annotations

import pytest

from engine.errors import (
    ConfigError,
    CorruptedError,
    EpochqError,
    InputError,
    PartitionLostError,
    ProjectionCorruptedError,
    RetryableError,
)
from engine.runtime.loop.apply import Verdict, judge
from engine.runtime.loop.draft import Staged
from engine.runtime.loop.partition import Partition
from engine.runtime.loop.write import Written


@pytest.mark.parametrize(("error", "verdict"), [
    (PartitionLostError("lost"), Verdict.FENCED),  # any way of losing the partition steps it down
    (CorruptedError("untrusted"), Verdict.PRODUCER_FAILED),  # set up again: a new producer, restore, claim
    (ProjectionCorruptedError("store"), Verdict.PRODUCER_FAILED),
    (ConfigError("a fatal cause"), Verdict.REFUSED),  # only an operator fixes it: hold, say it once, try later
    (RetryableError("transient"), Verdict.ABORTED),
    (InputError("bad record"), Verdict.ABORTED),
])
def test_a_failed_transaction_is_judged_by_its_errors_group(error: EpochqError, verdict: Verdict) -> None:
    written = Written(Partition(0, "owner-a"), Staged(), error=error)
    assert judge(written)[0] is verdict
