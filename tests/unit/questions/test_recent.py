"""The recent window's lateness tallies: buckets 2 % wide, percentiles within 2 % of the exact ones."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.questions.lateness import percentile
from engine.questions.recent import RATIO, Tally, bucket_of, bucket_value, quantile
from engine.errors import ValidationError


@given(st.integers(min_value=1, max_value=10**12))
def test_a_value_lies_within_its_bucket(value: int) -> None:
    bucket = bucket_of(value)
    assert RATIO ** (bucket - 1) < value * (1 + 1e-9) and value <= RATIO ** bucket * (1 + 1e-9)
    assert value / RATIO <= bucket_value(bucket) <= value * RATIO + 1


@given(st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300),
       st.sampled_from([50.0, 95.0, 99.0, 99.9]))
def test_a_percentile_from_buckets_is_within_two_percent_of_the_exact_one(values: list[int], q: float) -> None:
    exact = percentile(sorted(values), q)
    tallied = quantile(Counter(bucket_of(v) for v in values), q)
    assert exact / RATIO - 1 <= tallied <= exact * RATIO + 1


def test_zero_and_negative_lateness_are_bucket_zero() -> None:
    assert bucket_of(0) == bucket_of(-5) == 0 and bucket_value(0) == 0
    with pytest.raises(ValidationError):
        quantile(Counter(), 50)


def test_tallies_add_up() -> None:
    a, b = Tally(), Tally()
    a.outcomes["x"] = Counter(succeeded=2)
    b.outcomes["x"] = Counter(succeeded=1, failed=3)
    b.lateness["y"] = Counter({bucket_of(1000): 2})
    a.add(b)
    assert a.outcomes["x"] == Counter(succeeded=3, failed=3) and sum(a.lateness["y"].values()) == 2
