"""Small statistics every layer uses (stdlib only)."""

from __future__ import annotations

import math
from typing import Iterable


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None (``math.fsum``: exact summation); None when there are none."""
    v = [float(x) for x in values if x is not None]
    return math.fsum(v) / len(v) if v else None


def mean_or(values: Iterable[float | None], empty: float) -> float:
    """:func:`mean`, or ``empty`` when there is nothing to average (0.0 where no scans score 0, NaN where a
    table should print ``nan`` for an empty slice rather than fail)."""
    m = mean(values)
    return empty if m is None else m
