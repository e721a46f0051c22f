"""The engine's glibc malloc settings: what they are, and the switch that leaves malloc alone."""

from __future__ import annotations

import platform

import pytest

from engine.runtime.observe import malloctuning as mt


def test_thresholds_are_fixed_at_128_kib_and_arenas_capped_at_two_per_core() -> None:
    assert mt.settings(2) == {mt.M_MMAP_THRESHOLD: 131072, mt.M_TRIM_THRESHOLD: 131072, mt.M_ARENA_MAX: 4}
    assert mt.settings(0)[mt.M_ARENA_MAX] == 2


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "no"])
def test_the_switch_leaves_malloc_alone(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(mt.SWITCH, value)
    assert mt.tune_malloc() is False


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_takes_every_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mt.SWITCH, raising=False)
    assert mt.tune_malloc() is True
