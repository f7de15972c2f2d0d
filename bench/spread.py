"""Spread of a benchmark figure over rounds: the median and its bootstrap confidence interval.

A benchmark's rounds vary (other load on the machine, JIT, GC); a figure without its
interval cannot tell a real difference from noise. ``median_ci`` resamples the per-round
values with replacement (percentile bootstrap, Efron & Tibshirani, "An Introduction to the
Bootstrap", 1993, ch. 13) and reports the median with the interval its resampled medians
span.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def median_ci(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Median of ``values`` and the percentile-bootstrap ``confidence`` interval of it.

    Returns ``{"median", "ci_low", "ci_high", "confidence", "rounds"}`` in the unit of
    ``values``. ``ci_low``/``ci_high`` equal the median for a single value (no spread to
    estimate). Raises ``ValueError`` for no values or a ``confidence`` outside (0, 1)."""
    if not values:
        raise ValueError("median_ci needs at least one value")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    data = np.asarray(values, dtype=float)
    median = float(np.median(data))
    if len(data) == 1:
        low = high = median
    else:
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(data), size=(resamples, len(data)))
        medians = np.median(data[picks], axis=1)
        tail = (1.0 - confidence) / 2.0
        low, high = (float(x) for x in np.quantile(medians, [tail, 1.0 - tail]))
    return {
        "median": _round(median),
        "ci_low": _round(low),
        "ci_high": _round(high),
        "confidence": confidence,
        "rounds": len(data),
    }


def _round(x: float) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    # Four significant digits: a bench figure is not more precise than that.
    return round(x, max(0, 3 - math.floor(math.log10(abs(x)))))
