"""An engine process freezes its start-up objects and collects the young generation less often."""

from __future__ import annotations

import subprocess
import sys

from engine.runtime.observe.gctuning import THRESHOLDS


def test_tuning_freezes_the_survivors_and_raises_the_thresholds():
    probe = ("import gc; from engine.runtime.observe.gctuning import tune_for_latency; tune_for_latency(); "
             "print(gc.get_freeze_count(), *gc.get_threshold())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    frozen, *thresholds = (int(x) for x in out)
    assert frozen > 1000  # every module object loaded so far
    assert tuple(thresholds) == THRESHOLDS
    assert THRESHOLDS[0] > 700  # CPython's default young threshold
