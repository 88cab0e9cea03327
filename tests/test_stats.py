"""common.stats: the one definition of the episode halves, the index-to-half map and the evidence run's
thirds (property tests against direct slicing)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from spectrum_rft.common.stats import first_last, half_of, halves, mean, thirds

floats = st.floats(-1e6, 1e6, allow_nan=False)


@given(st.lists(floats, max_size=40))
def test_halves_and_half_of_agree(xs):
    early, late = halves(xs)
    n = len(xs)
    if n < 2:
        assert (early, late) == (None, None)
        return
    idx = {"early": [], "late": [], None: []}
    for i in range(1, n + 1):
        idx[half_of(i, n)].append(xs[i - 1])
    assert len(idx["early"]) == len(idx["late"]) == n // 2 and len(idx[None]) == n % 2
    assert early == mean(idx["early"]) and late == mean(idx["late"])


@given(st.lists(st.one_of(st.none(), floats), max_size=40))
def test_thirds_are_at_least_one_step_each(xs):
    first, last = thirds(xs)
    k = max(1, len(xs) // 3)
    assert (first, last) == (mean(xs[:k]), mean(xs[-k:]))
    if xs and xs[0] is not None:
        assert first is not None and math.isfinite(first)


def test_bad_inputs_say_why():
    assert first_last([1.0, 2.0], 0) == (None, None)
    with pytest.raises(ValueError, match="not in 1..4"):
        half_of(5, 4)
    with pytest.raises(ValueError, match="not in 1..4"):
        half_of(0, 4)
    assert thirds([]) == (None, None)
