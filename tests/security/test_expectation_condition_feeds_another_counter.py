"""A SparkApplication's expectation condition (a field its author writes) tries to reach the
expectation counter of another vertex: when the counter was a session function
(``sg_expect_count_N``, named by a process-wide sequence), a condition such as
``sg_expect_count_1(true) OR true`` passed the condition check and added rows to another
vertex's counts every time it ran, and a user function of that name was silently replaced.
The counter is now built as a column and is no function of the session: such a condition is
refused when the vertex is built (``PlanError`` naming the vertex and the expectation), and the
counts of the vertex it aimed at stay its own, on a real local Spark."""

from __future__ import annotations

from typing import Any

import pytest

from sparkglass.runtime.contract.errors import PlanError
from sparkglass.runtime.contract.expectations import Expectation
from sparkglass.runtime.quality import apply_expectations, check_conditions

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    "condition",
    [
        "sg_expect_count(true) OR true",
        "sg_expect_count_1(true) OR true",
        "sg_expect_count_2(id > 0)",
    ],
)
def test_a_condition_cannot_call_a_counter(spark: Any, condition: str) -> None:
    df = spark.range(10)
    # A counter built before, for another vertex (a bounded frame is counted only when
    # streaming, so build one through the same path a streaming vertex takes).
    other = spark.readStream.format("rate").load().selectExpr("value AS id")
    _counted, tally = apply_expectations(
        None, "other", other, [Expectation(name="positive", condition="id >= 0")]
    )
    assert tally is not None
    try:
        with pytest.raises(PlanError) as caught:
            check_conditions(df, "intruder", [Expectation(name="sneaky", condition=condition)])
        message = str(caught.value)
        assert "'intruder'" in message and "'sneaky'" in message
        assert "sg_expect_count" in message
        functions = [r[0] for r in spark.sql("SHOW USER FUNCTIONS").collect()]
        assert not [f for f in functions if "sg_expect" in f], functions
    finally:
        tally.release()
