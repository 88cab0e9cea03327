"""Small statistics every layer uses (stdlib only)."""

from __future__ import annotations

import math
from typing import Iterable


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None (``math.fsum``: exact summation); None when there are none."""
    v = [float(x) for x in values if x is not None]
    return math.fsum(v) / len(v) if v else None
