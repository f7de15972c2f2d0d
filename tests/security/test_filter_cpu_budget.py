"""A round's filter cannot stall the job: past its CPU budget it is stopped, and the round says so.

The attack: whoever may create a DataSample picks the filter, and the filter runs on the
application's task threads for every row a gate admits. The allowlist bounds what one
evaluation can cost (no regular expressions, no repeat, a bounded round scale), but the
worst filter it still admits, dozens of case conversions and substring searches over a long
column, costs milliseconds per row. Each partition of a round may spend the tap's
``tostring-budget-ms`` for each second of the round on the filter; past that the filter is
stopped there for the rest of the round, and the result names the subtasks
(``filterStoppedSubtasks``) instead of dropping rows without a word.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkglass.runtime.contract.round_request import MAX_FILTER_LENGTH, round_request
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.tostring-budget-ms": "20",
}


def worst_admitted_filter() -> str:
    """As many whole-column case conversions and searches as fit the filter's length: each
    copies and scans the column (the costliest thing the allowlist admits), and none matches,
    so every admitted row runs all of them."""
    clause = "contains(lower(payload), 'qq') OR contains(upper(payload), 'QQ')"
    clauses = [clause] * (MAX_FILTER_LENGTH // (len(clause) + 4))
    text = " OR ".join(clauses)
    assert len(text) <= MAX_FILTER_LENGTH
    return text


@pytest.fixture()
def heavy(spark: Any) -> Iterator[Pipeline]:
    """A stream whose vertex carries a 200 KB string column (2 partitions)."""
    with spark_conf(spark, CONF):
        p = Pipeline("heavy", spark)
        p.source(
            "ticks",
            spark.readStream.format("rate")
            .option("rowsPerSecond", 20)
            .option("numPartitions", 2)
            .load(),
        )
        p.vertex(
            "wide",
            "ticks",
            lambda df: df.selectExpr("value", "repeat('abcdefgh', 25000) AS payload"),
        )
        p.sink(
            "out",
            "wide",
            lambda df: df.writeStream.format("noop").trigger(processingTime="200 milliseconds"),
        )
        p.start()
        deadline = time.monotonic() + 120
        while not any(q.lastProgress for q in p.queries.values()):
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.1)
        yield p
        p.stop()


def test_the_worst_admitted_filter_is_stopped_at_its_budget_and_the_round_says_so(
    spark: Any, heavy: Pipeline
) -> None:
    c = registry.coordinator_for(spark)
    request = round_request(filter=worst_admitted_filter())
    result = None
    for _attempt in range(4):  # a window no micro-batch fell into says nothing: ask again
        started = c.start_round("wide", request=request)
        assert started.status is SampleStatus.PENDING, started
        result = c.wait(started.round_id, 120)
        if result.filter_stopped_subtasks:
            break
    assert result is not None and result.status is not SampleStatus.FAILED, result
    assert result.filter_stopped_subtasks, result
    assert set(result.filter_stopped_subtasks) <= {0, 1}
    assert result.total_record_count == 0  # nothing matched, and nothing unmatched leaked
    assert result.to_json_dict()["filterStoppedSubtasks"] == result.filter_stopped_subtasks
    # The job went on: its query still completes micro-batches after the round.
    query = next(iter(heavy.queries.values()))
    before = int(query.lastProgress["batchId"])
    deadline = time.monotonic() + 120
    while int(query.lastProgress["batchId"]) <= before:
        assert time.monotonic() < deadline, "the job stopped making progress"
        time.sleep(0.2)


def test_a_cheap_filter_is_never_stopped(spark: Any, heavy: Pipeline) -> None:
    c = registry.coordinator_for(spark)
    started = c.start_round("wide", request=round_request(filter="value % 2 = 0"))
    result = c.wait(started.round_id, 120)
    assert result.filter_stopped_subtasks == []
    assert "filterStoppedSubtasks" not in result.to_json_dict()
