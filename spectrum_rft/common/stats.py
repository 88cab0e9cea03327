"""Small statistics every layer uses (stdlib only)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None (``math.fsum``: exact summation); None when there are none."""
    v = [float(x) for x in values if x is not None]
    return math.fsum(v) / len(v) if v else None


def stdev(values: Iterable[float]) -> float:
    """The sample standard deviation (n - 1 in the denominator) of at least two values."""
    v = [float(x) for x in values]
    if len(v) < 2:
        raise ValueError("stdev needs at least two values")
    m = math.fsum(v) / len(v)
    return math.sqrt(math.fsum((x - m) ** 2 for x in v) / (len(v) - 1))


def pstdev(values: Iterable[float]) -> float:
    """The population standard deviation (n in the denominator) of at least one value: the spread of a
    whole GRPO group, not an estimate of a wider population's."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError("pstdev needs at least one value")
    m = math.fsum(v) / len(v)
    return math.sqrt(math.fsum((x - m) ** 2 for x in v) / len(v))


def standard_error(values: Sequence[float]) -> float | None:
    """The standard error of the mean (:func:`stdev` / sqrt(n)); None for fewer than two values."""
    return stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else None


def mean_se(values: Sequence[float]) -> dict[str, float | int | None]:
    """``{"mean", "se", "n"}`` of the values: the summary every table of means with their standard errors prints."""
    return {"mean": mean(values), "se": standard_error(values), "n": len(values)}


def mean_or(values: Iterable[float | None], empty: float) -> float:
    """:func:`mean`, or ``empty`` when there is nothing to average (0.0 where no scans score 0, NaN where a
    table should print ``nan`` for an empty slice rather than fail)."""
    m = mean(values)
    return empty if m is None else m


def first_last(values: Sequence[float | None], k: int) -> tuple[float | None, float | None]:
    """The means (:func:`mean`: None entries skipped) of the first ``k`` and of the last ``k`` values;
    (None, None) for k < 1."""
    if k < 1:
        return None, None
    return mean(values[:k]), mean(values[-k:])


def halves(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The means of the first and the last ``len // 2`` values (the middle one of an odd count is in
    neither): an episode's early and late halves. (None, None) for fewer than two values."""
    return first_last(values, len(values) // 2)


def half_of(i: int, n: int) -> str | None:
    """Which of :func:`halves` of ``n`` values the ``i``-th (1-based) is in: "early", "late", or None (the
    middle one of an odd count)."""
    if not 1 <= i <= n:
        raise ValueError(f"index {i} is not in 1..{n}")
    half = n // 2
    return "early" if i <= half else "late" if i > n - half else None


def thirds(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """The means of the first and of the last third (at least one value each) of a run's per-step values:
    the evidence run's first-third vs last-third rule (RESULTS_memory.md section 9)."""
    return first_last(values, max(1, len(values) // 3))


def trailing_mean(values: Sequence[float], k: int) -> list[float]:
    """The running mean of each value and the up to ``k - 1`` values before it (a plot's smoothing)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return [math.fsum(values[max(0, i - k + 1):i + 1]) / len(values[max(0, i - k + 1):i + 1])
            for i in range(len(values))]


@dataclass(frozen=True)
class Fit:
    slope: float
    intercept: float
    r2: float | None  # None when y is constant (R^2 undefined)
    n: int


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> Fit | None:
    """Ordinary least squares ``y = intercept + slope * x`` with R^2; None with fewer than two distinct x."""
    if len(xs) != len(ys):
        raise ValueError("xs and ys differ in length")
    pts = [(float(x), float(y)) for x, y in zip(xs, ys)]
    if any(not (math.isfinite(x) and math.isfinite(y)) for x, y in pts):
        raise ValueError("linear_fit needs finite numbers")
    n = len(pts)
    if n < 2 or min(x for x, _ in pts) == max(x for x, _ in pts):
        return None
    mx = math.fsum(x for x, _ in pts) / n
    my = math.fsum(y for _, y in pts) / n
    sxx = math.fsum((x - mx) ** 2 for x, _ in pts)
    sxy = math.fsum((x - mx) * (y - my) for x, y in pts)
    slope = sxy / sxx
    intercept = my - slope * mx
    # R^2 on y deviations scaled to at most 1, so tiny (subnormal) spreads do not underflow to 0
    scale = max(abs(y - my) for _, y in pts)
    if min(y for _, y in pts) == max(y for _, y in pts) or scale == 0.0:
        r2 = None
    else:
        syy = math.fsum(((y - my) / scale) ** 2 for _, y in pts)
        sxy_s = math.fsum((x - mx) * ((y - my) / scale) for x, y in pts)
        r2 = min(1.0, max(0.0, (sxy_s * sxy_s) / (sxx * syy)))
    return Fit(slope, intercept, r2, n)
