"""The report's statistics: least-squares fit with R^2 (the mean and the standard error: spectrum_rft.common.stats)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


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
