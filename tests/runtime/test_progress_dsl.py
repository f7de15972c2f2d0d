"""Live metrics of a DSL ``Pipeline`` on real local Spark: rows since the start past Spark's
``recentProgress`` window, headline rates that agree with the vertices', batch duration,
latency, event-time watermark and rows in state, and the last minutes of them
(``Pipeline.metrics(history=True)``, what ``GET /api/v1/progress?history=true`` serves)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkglass.runtime.pipeline import Pipeline
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

ROWS_PER_BATCH = 20
RECENT = "spark.sql.streaming.numRecentProgressUpdates"
HISTORY_MINUTES = "spark.sparkglass.progress.historyMinutes"
HISTORY_POINTS = "spark.sparkglass.progress.historyPoints"


def wait_for(condition: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def running(spark: Any) -> Iterator[Pipeline]:
    """Two queries: ``counted`` (exactly 20 rows per micro-batch into a memory table) and
    ``windows`` (a windowed count with a watermark), Spark keeping 5 progress updates each."""

    settings = {RECENT: "5", HISTORY_MINUTES: "1", HISTORY_POINTS: "30"}
    with spark_conf(spark, settings):
        yield from _figures_pipeline(spark)


def _figures_pipeline(spark: Any) -> Iterator[Pipeline]:
    from pyspark.sql import functions as F

    p = Pipeline("figures", spark)
    p.source(
        "ticks",
        spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH).load(),
    )
    p.vertex("kept", "ticks", lambda df: df.where("value >= 0"))
    p.sink(
        "counted",
        "kept",
        lambda df: (
            df.writeStream.format("memory")
            .queryName("dsl_progress_counted")
            .trigger(processingTime="50 milliseconds")
        ),
    )
    p.source("events", spark.readStream.format("rate").option("rowsPerSecond", 40).load())
    p.vertex(
        "per-second",
        "events",
        lambda df: (
            df.withWatermark("timestamp", "1 second")
            .groupBy(F.window("timestamp", "1 second"))
            .count()
        ),
    )
    p.sink(
        "windows",
        "per-second",
        lambda df: (
            df.writeStream.format("noop")
            .outputMode("append")
            .trigger(processingTime="200 milliseconds")
        ),
    )
    p.start()
    try:
        wait_for(
            lambda: (
                (p.queries["counted"].lastProgress or {}).get("batchId", -1) >= 15
                and (m := p.metrics()).vertices.get("per-second") is not None
                and bool(m.vertices["per-second"].event_time_watermark)
            ),
            "15 micro-batches, and a watermark",
        )
        yield p
    finally:
        p.stop()


def test_rates_duration_latency_watermark_and_state(running: Pipeline) -> None:
    m = running.metrics()
    kept, windowed = m.vertices["kept"], m.vertices["per-second"]
    # Headline rates from the same micro-batches as the vertices': never 0 while rows flow,
    # and at least the rate of a vertex that passes a query's whole input through.
    assert kept.rows_last_micro_batch == ROWS_PER_BATCH and kept.rows_per_second > 0
    assert m.input_rows_per_second >= kept.rows_per_second * (1 - 1e-9) > 0
    assert m.processed_rows_per_second > 0
    assert kept.processed_rows_per_second is not None and kept.processed_rows_per_second > 0
    # Figures of the queries running the vertex.
    assert kept.batch_duration_ms is not None and kept.batch_duration_ms > 0
    assert kept.latency_ms is not None and kept.latency_ms >= kept.batch_duration_ms
    assert kept.event_time_watermark is None and kept.state_rows is None
    now_ms = time.time() * 1000
    assert windowed.event_time_watermark is not None
    assert now_ms - 120_000 < windowed.event_time_watermark <= now_ms
    assert windowed.state_rows is not None and windowed.state_rows >= 1
    assert m.event_time_watermark == windowed.event_time_watermark
    assert m.state_rows == windowed.state_rows
    assert m.batch_duration_ms is not None and m.latency_ms is not None
    wire = m.to_json_dict()
    for key in ("batchDurationMs", "latencyMs", "eventTimeWatermark", "stateRows"):
        assert wire["vertices"]["per-second"][key] is not None, key


def test_history_and_rows_total_past_the_recent_progress_window(
    running: Pipeline, spark: Any
) -> None:
    h = running.metrics(history=True).history
    assert h is not None and (h.window_seconds, h.max_points) == (60, 30)
    assert 1 <= len(h.timestamps) <= 30
    assert all(len(getattr(h, s)) == len(h.timestamps) for s in ("latency_ms", "state_rows"))
    totals = [r for r in h.vertices["kept"].rows_total if r is not None]
    assert totals == sorted(totals)
    # Every micro-batch counted once, past the 5 progress updates Spark keeps.
    query = running.queries["counted"]
    query.stop()
    batches = int(query.lastProgress["batchId"]) + 1  # those that reported their progress
    assert batches > 10 and len(query.recentProgress) <= 5
    rows = ROWS_PER_BATCH * batches
    # The memory table: every row of them (and of a last one stop() cut short after its
    # commit, before its progress).
    assert spark.table("dsl_progress_counted").count() in (rows, rows + ROWS_PER_BATCH)
    # The termination reaches the listener on its own thread, after the last progress.
    wait_for(
        lambda: (
            (v := running.metrics().vertices["kept"]).rows_total == rows and v.rows_per_second == 0
        ),
        "every batch counted and the stopped query's rate at 0",
    )
    stopped = running.metrics().vertices["kept"]
    assert stopped.rows_total == rows and stopped.rows_per_second == 0  # stopped: reads none
