"""``Pipeline.metrics()`` on real local Spark: the live metrics the driver control endpoint
serves at ``GET /api/v1/progress`` (query state, micro-batches, rows and rows/s per vertex)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics, QueryState
from sparkglass.runtime.pipeline import Pipeline

pytestmark = pytest.mark.spark

TRIGGER_S = 0.2


def wait_for(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_metrics_of_a_running_then_stopped_pipeline(spark: Any) -> None:
    p = Pipeline("metered", spark)
    p.source(
        "ticks",
        spark.readStream.format("rate").option("rowsPerSecond", 200).option("numPartitions", 2)
        .load(),
    )
    p.vertex("evens", "ticks", lambda df: df.where("value % 2 = 0"))
    p.sink(
        "out",
        "evens",
        lambda df: df.writeStream.format("noop").trigger(processingTime=f"{TRIGGER_S} seconds"),
    )
    before = p.metrics()
    assert before.state is QueryState.NOT_STARTED and before.micro_batches == 0
    assert before.vertices == {}
    p.start()
    try:
        wait_for(
            lambda: (m := p.metrics()).micro_batches >= 3
            and m.vertices.get("ticks") is not None
            and m.vertices["ticks"].rows_total > 0,
            "three micro-batches with rows",
        )
        m = p.metrics()
        assert m.state is QueryState.ACTIVE and m.active_queries == 1 and m.failed is None
        assert set(m.vertices) == {"ticks", "evens"}
        ticks, evens = m.vertices["ticks"], m.vertices["evens"]
        # The filter keeps about half of the rows, never more than it read.
        assert 0 < evens.rows_total <= ticks.rows_total
        assert evens.rows_last_micro_batch <= ticks.rows_last_micro_batch
        # Rows/s of the last micro-batch over the time since the previous trigger, which is
        # at least the trigger interval apart.
        assert ticks.rows_per_second <= ticks.rows_last_micro_batch / TRIGGER_S + 1e-6
        if ticks.rows_last_micro_batch:
            assert ticks.rows_per_second > 0
        now_ms = time.time() * 1000
        assert m.last_micro_batch_timestamp is not None
        assert now_ms - 120_000 < m.last_micro_batch_timestamp <= now_ms + 1000
        assert abs(m.observed_at - now_ms) < 5000
        wire: dict[str, Any] = m.to_json_dict()
        assert wire["state"] == "ACTIVE" and "rowsLastMicroBatch" in wire["vertices"]["ticks"]
        assert PipelineMetrics.model_validate(wire) == m
    finally:
        p.stop()
    stopped = p.metrics()
    assert stopped.state is QueryState.STOPPED and stopped.active_queries == 0
    assert stopped.micro_batches >= 3  # what ran stays counted


def test_a_failed_query_is_failed_with_its_reason(spark: Any, tmp_path: Any) -> None:
    from pyspark.sql import functions as F

    @F.udf("bigint")
    def explode_at_3(v: int) -> int:
        if v >= 3:
            raise ValueError("value 3 is not welcome")
        return v

    p = Pipeline("failing", spark)
    p.source("ticks", spark.readStream.format("rate").option("rowsPerSecond", 20).load())
    p.vertex("boom", "ticks", lambda df: df.select(explode_at_3("value").alias("value")))
    p.sink(
        "out",
        "boom",
        lambda df: df.writeStream.format("noop").trigger(processingTime=f"{TRIGGER_S} seconds"),
    )
    p.start()
    try:
        wait_for(lambda: p.metrics().state is QueryState.FAILED, "the query to fail", 120)
        m = p.metrics()
        assert m.active_queries == 0
        assert m.failed is not None and m.failed.startswith("out: ")
        assert "value 3 is not welcome" in m.failed
    finally:
        p.stop()


def test_two_pipelines_of_one_session_count_their_own(spark: Any) -> None:
    """Spark delivers every query's progress to every listener: a pipeline whose ``evens``
    keeps no row must not show the rows and micro-batches of another's ``evens``."""

    def rate_pipeline(name: str, keep: str) -> Pipeline:
        p = Pipeline(name, spark)
        p.source("ticks", spark.readStream.format("rate").option("rowsPerSecond", 100).load())
        p.vertex("evens", "ticks", lambda df: df.where(keep))
        p.sink(
            "out",
            "evens",
            lambda df: df.writeStream.format("noop").trigger(
                processingTime=f"{TRIGGER_S} seconds"
            ),
        )
        return p

    quiet, busy = rate_pipeline("quiet", "value < 0"), rate_pipeline("busy", "value % 2 = 0")
    quiet.start()
    busy.start()
    try:
        wait_for(
            lambda: quiet.metrics().micro_batches >= 3
            and (b := busy.metrics()).micro_batches >= 3
            and b.vertices["evens"].rows_total > 0,
            "three micro-batches of each, rows in busy's evens",
        )
        mine = quiet.metrics()
        ran = quiet.queries["out"].lastProgress["batchId"] + 1  # read after: never fewer
    finally:
        busy.stop()
        quiet.stop()
    assert mine.vertices["evens"].rows_total == 0
    assert mine.micro_batches <= ran
