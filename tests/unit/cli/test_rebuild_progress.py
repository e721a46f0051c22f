"""`projections rebuild --all`: a partition's result line is never written onto the progress bar's line."""

from __future__ import annotations

import pytest

from engine.cli.projections import _Overall, _report


def test_a_result_printed_while_the_bar_is_drawn_wipes_the_bar_first(capsys: pytest.CaptureFixture[str]) -> None:
    bar = _Overall("verify")

    def results() -> list[tuple[int, int]]:
        bar(46, 55)  # the bar at 83 %, its line not ended
        return [(1, 6)]

    assert _report(results(), bar.clear) == 0
    bar(55, 55)
    out, err = capsys.readouterr()
    assert out == "partition 1: rebuilt up to offset 6\n"
    assert err.startswith("\rverify: [####") and "\r\x1b[K" in err  # wiped before the result line
    assert err.index("\r\x1b[K") < err.index("(55/55 offsets)") and err.endswith("\n")
