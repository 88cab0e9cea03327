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


@given(st.lists(floats, min_size=1, max_size=40))
def test_pstdev_is_the_spread_of_the_whole_group(xs):
    from spectrum_rft.common.stats import pstdev, stdev

    sd = pstdev(xs)
    assert sd >= 0 and math.isclose(pstdev([x + 1000.0 for x in xs]), sd, rel_tol=1e-6, abs_tol=1e-6)
    if len(xs) >= 2:  # n vs n - 1 in the denominator
        assert math.isclose(sd, stdev(xs) * math.sqrt((len(xs) - 1) / len(xs)), rel_tol=1e-9, abs_tol=1e-9)
    else:
        assert sd == 0.0


@given(st.lists(floats, max_size=40), st.integers(1, 6))
def test_trailing_mean_averages_each_value_with_the_ones_before(xs, k):
    from spectrum_rft.common.stats import trailing_mean

    out = trailing_mean(xs, k)
    assert len(out) == len(xs)
    for i, v in enumerate(out):
        window = xs[max(0, i - k + 1):i + 1]
        assert min(window) - 1e-6 <= v <= max(window) + 1e-6
    assert trailing_mean(xs, 1) == [float(x) for x in xs]


def test_pstdev_and_trailing_mean_refuse_what_has_no_answer():
    from spectrum_rft.common.stats import pstdev, trailing_mean

    with pytest.raises(ValueError, match="at least one"):
        pstdev([])
    with pytest.raises(ValueError, match="k must be"):
        trailing_mean([1.0], 0)
