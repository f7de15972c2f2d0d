"""The benchmarks' spread figure (bench/spread.py): what every bench result's interval
rests on."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from spread import median_ci


def test_interval_holds_the_median_and_narrows_with_more_rounds() -> None:
    rng = random.Random(7)
    few = [100 + rng.gauss(0, 5) for _ in range(8)]
    many = [100 + rng.gauss(0, 5) for _ in range(200)]
    a, b = median_ci(few), median_ci(many)
    for ci in (a, b):
        assert ci["ci_low"] <= ci["median"] <= ci["ci_high"]
        assert ci["confidence"] == 0.95
    assert (b["ci_high"] - b["ci_low"]) < (a["ci_high"] - a["ci_low"])
    # 200 draws around 100 with sd 5: the median's interval covers the true median.
    assert b["ci_low"] < 100 < b["ci_high"]
    assert b["rounds"] == 200


def test_one_value_has_no_spread_and_bad_input_is_named() -> None:
    assert median_ci([3.0]) == {
        "median": 3.0, "ci_low": 3.0, "ci_high": 3.0, "confidence": 0.95, "rounds": 1
    }
    with pytest.raises(ValueError, match="at least one value"):
        median_ci([])
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
        median_ci([1.0, 2.0], confidence=1.5)
