"""The row a Python batch vertex died on: named in its task's failure and in the pipeline's
``failed`` reason, its values withheld when redaction rules apply. On the shared local
Spark session."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

from sparkglass.runtime.contract.pipeline_metrics import QueryState
from sparkglass.runtime.failing_row import (
    MARK,
    WITHHELD_ROW,
    FailingRow,
    failing_row_error,
    failing_row_in,
)
from sparkglass.runtime.pipeline import Pipeline
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

REDACT_KEY = "spark.sparkglass.sampling.redact"


def no_seven(batch: pa.RecordBatch) -> pa.RecordBatch:
    for value in batch.column("id").to_pylist():
        if value == 7:
            raise ValueError(f"id {value} is unlucky")
    return batch


def test_a_bounded_vertex_fails_its_task_naming_the_row(spark: Any) -> None:
    with spark_conf(spark, {REDACT_KEY: None}):
        p = Pipeline("failing-row-bounded", spark)
        p.source("ids", spark.range(0, 20, numPartitions=2))
        p.python_vertex("lucky", "ids", no_seven, "id BIGINT")
        with pytest.raises(Exception) as failure:
            p.output("lucky").collect()
        p.stop()
    row = failing_row_in(str(failure.value))
    expected = FailingRow("lucky", '{"id": 7}', "ValueError: id 7 is unlucky")
    assert row == expected, str(failure.value)


def test_with_redaction_rules_the_row_s_values_and_the_message_are_withheld(spark: Any) -> None:
    rules = '[{"columns": ["id"], "action": "drop"}]'
    with spark_conf(spark, {REDACT_KEY: rules}):
        p = Pipeline("failing-row-redacted", spark)
        p.source("ids", spark.range(0, 20, numPartitions=2))
        p.python_vertex("lucky", "ids", no_seven, "id BIGINT")
        with pytest.raises(Exception) as failure:
            p.output("lucky").collect()
        p.stop()
    text = str(failure.value)
    row = failing_row_in(text)
    assert row is not None and row.vertex == "lucky"
    assert WITHHELD_ROW in row.row and '"columns": ["id"]' in row.row
    assert row.error.startswith("ValueError: (message withheld")
    # Nor does the original exception's message reach Spark's failure text (and its logs).
    assert "unlucky" not in text


def test_a_streaming_pipeline_s_failed_reason_names_the_row(spark: Any, tmp_path: Any) -> None:
    def no_three(batch: pa.RecordBatch) -> pa.RecordBatch:
        for value in batch.column("value").to_pylist():
            if value == 3:
                raise ValueError("value 3 is not welcome")
        return batch

    with spark_conf(spark, {REDACT_KEY: None}):
        p = Pipeline("failing-row-stream", spark, checkpoint_root=tmp_path / "checkpoints")
        p.source("ticks", spark.readStream.format("rate").option("rowsPerSecond", 20).load())
        p.vertex("values", "ticks", lambda df: df.select("value"))
        p.python_vertex("boom", "values", no_three, "value BIGINT")
        p.sink(
            "out",
            "boom",
            lambda df: df.writeStream.format("noop").trigger(processingTime="0.2 seconds"),
        )
        p.start()
    try:
        deadline = time.monotonic() + 120
        while p.metrics().state is not QueryState.FAILED:
            assert time.monotonic() < deadline, "the query did not fail"
            time.sleep(0.2)
        failed = p.metrics().failed
        assert failed == (
            "out: vertex 'boom' raised on row {\"value\": 3}: ValueError: value 3 is not welcome"
        )
    finally:
        p.stop()


def test_a_batch_no_row_alone_raises_on_is_said_so() -> None:
    def needs_two_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.num_rows > 1:
            raise RuntimeError("a batch of several rows")
        return batch

    batch = pa.RecordBatch.from_pylist([{"id": 1}, {"id": 2}])
    error = failing_row_error(
        "pairs", needs_two_rows, batch, RuntimeError("a batch of several rows"), secrets=()
    )
    row = failing_row_in(f"PythonException: {error}\n\tat org.apache.spark...")
    assert row is not None and not row.found
    assert row.summary() == (
        "vertex 'pairs' raised on a batch (no row alone): RuntimeError: a batch of several rows"
    )


def test_a_long_row_is_cut_and_other_failures_carry_none() -> None:
    def always(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise KeyError("x")

    batch = pa.RecordBatch.from_pylist([{"text": "y" * 5000}])
    row = failing_row_in(str(failing_row_error("long", always, batch, KeyError("x"), secrets=())))
    assert row is not None and len(row.row) == 600 and row.row.endswith("…")
    assert failing_row_in("Job aborted due to stage failure: executor lost") is None
    assert failing_row_in(MARK + '{"vertex": "cut') is None


async def no_seven_async(record: dict[str, Any]) -> dict[str, Any]:
    if record["id"] == 7:
        raise ValueError("id 7 is unlucky")
    return record


def test_an_async_request_failing_for_good_fails_its_task_naming_the_record(spark: Any) -> None:
    with spark_conf(spark, {REDACT_KEY: None}):
        p = Pipeline("failing-row-async", spark)
        p.source("ids", spark.range(0, 20, numPartitions=2))
        p.async_vertex("lookup", "ids", no_seven_async, capacity=4)
        with pytest.raises(Exception) as failure:
            p.output("lookup").collect()
        p.stop()
    row = failing_row_in(str(failure.value))
    expected = FailingRow(
        "lookup",
        '{"id": 7}',
        "AsyncRequestError: async request failed after 1 attempt(s): ValueError: id 7 is unlucky",
    )
    assert row == expected, str(failure.value)
