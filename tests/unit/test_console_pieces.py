"""The console's pure pieces added for issue 22: ids in paths, dead-letter groups, progress, charts, paging text."""

from __future__ import annotations

import pytest

from engine.console.params import path_ids, segment
from engine.errors import ValidationError

SHAPE = ("actions", "jobs", None, "cancel")


def test_an_id_is_one_fully_encoded_segment() -> None:
    assert segment("y/../abc") == "y%2F..%2Fabc"
    assert segment("a b?c#d&e") == "a%20b%3Fc%23d%26e"
    assert path_ids(b"/actions/jobs/" + segment("y/../abc").encode() + b"/cancel", SHAPE) == ["y/../abc"]
    assert path_ids(b"/actions/jobs/plain-id/cancel?x=1", SHAPE) == ["plain-id"]


@pytest.mark.parametrize("raw", [b"/actions/jobs/y/../abc/cancel", b"/actions/jobs/abc/replay",
                                 b"/actions/jobs/../cancel", b"/actions/jobs//cancel", b"/actions/jobs/%FF/cancel"])
def test_a_path_of_another_shape_names_no_id(raw: bytes) -> None:
    with pytest.raises(ValidationError, match="path"):
        path_ids(raw, SHAPE)
