"""Small statistics every layer uses (stdlib only)."""

from __future__ import annotations

import math
from typing import Iterable


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
