"""Small statistics every layer uses (stdlib only)."""

from __future__ import annotations

import math
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


def mean_or(values: Iterable[float | None], empty: float) -> float:
    """:func:`mean`, or ``empty`` when there is nothing to average (0.0 where no scans score 0, NaN where a
    table should print ``nan`` for an empty slice rather than fail)."""
    m = mean(values)
    return empty if m is None else m


def halves(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The means of the first and the last ``len // 2`` values (the middle one of an odd count is in
    neither): an episode's early and late halves. (None, None) for fewer than two values."""
    n = len(values) // 2
    if n == 0:
        return None, None
    return mean(values[:n]), mean(values[-n:])
