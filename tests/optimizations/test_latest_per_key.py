"""idempotent(key) in use: only the latest row per key per micro-batch goes downstream."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkglass.runtime.contract.attributes import idempotent
from sparkglass.runtime.contract.errors import PlanError
from sparkglass.runtime.contract.plan import Optimizations
from sparkglass.runtime.optimizations.latest_per_key import latest_per_key
from sparkglass.runtime.pipeline import Pipeline

from .conftest import FLIGHT_SCHEMA

pytestmark = pytest.mark.spark


def status(parsed: DataFrame) -> DataFrame:
    """Each departed flight as its carrier's current status (a per-record output)."""
    return parsed.where(F.col("dep_time").isNotNull()).select(
        "carrier", "seq", "origin", "dep_delay"
    )


carrier_status = idempotent(key="carrier", order_by="seq")(status)


def _unordered(parsed: DataFrame) -> DataFrame:
    return status(parsed)


carrier_status_unordered = idempotent(key=["carrier"])(_unordered)


def run(spark, days: Path, work: Path, fn, mode: str, opts: Optimizations, expect: int = 0):
    batches: dict[int, list[tuple]] = defaultdict(list)

    def collect(df: DataFrame, batch_id: int) -> None:
        batches[batch_id].extend(tuple(r) for r in df.collect())

    p = Pipeline("status", spark, checkpoint_root=work)
    p.source(
        "flights",
        spark.readStream.schema(FLIGHT_SCHEMA)
        .option("header", "true")
        .option("maxFilesPerTrigger", "1")
        .csv(str(days)),
    )
    p.vertex("carrier-status", "flights", fn)
    p.sink(
        "collect",
        "carrier-status",
        lambda df: df.writeStream.outputMode(mode).foreachBatch(collect),
    )
    p.start(optimizations=opts)
    try:
        p.process_all_available()
        deadline = time.monotonic() + 120
        # Append mode hands a batch's rows on when the watermark passes, in the next batch.
        while sum(map(len, batches.values())) < expect and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        p.stop()
    return {k: v for k, v in batches.items() if v}


def latest(rows: list[tuple]) -> set[tuple]:
    best: dict[str, tuple] = {}
    for r in rows:
        if r[0] not in best or r[1] > best[r[0]][1]:
            best[r[0]] = r
    return set(best.values())


def test_update_mode_latest_row_per_key_per_micro_batch(spark, flight_days, tmp_path):
    before = run(spark, flight_days, tmp_path / "a", carrier_status, "update",
                 Optimizations(latest_per_key=False))  # fmt: skip
    after = run(spark, flight_days, tmp_path / "b", carrier_status, "update", Optimizations())
    assert sorted(before) == sorted(after) == [0, 1, 2]
    for batch_id, rows in before.items():
        assert set(after[batch_id]) == latest(rows)
        assert len(after[batch_id]) == len({r[0] for r in rows})  # one row per carrier
        assert len(rows) > 10 * len(after[batch_id])


def test_append_mode_without_order_by_keeps_the_last_emitted(spark, flight_days, tmp_path):
    before = run(spark, flight_days, tmp_path / "a", carrier_status_unordered, "append",
                 Optimizations(latest_per_key=False))  # fmt: skip
    expected = set().union(*(latest(rows) for rows in before.values()))
    after = run(spark, flight_days, tmp_path / "b", carrier_status_unordered, "append",
                Optimizations(), expect=len(expected))  # fmt: skip
    emitted = [r for rows in after.values() for r in rows]
    # Each day file is one task, so "last emitted" is the largest seq: same rows.
    assert len(emitted) == len(expected)
    assert set(emitted) == expected


def test_an_aggregation_is_left_as_is_and_bounded_too(spark):
    stream = spark.readStream.format("rate").load()
    agg = stream.groupBy((F.col("value") % 3).alias("k")).count()
    assert latest_per_key(agg, ["k"], vertex="agg") is agg
    bounded = spark.range(5).withColumn("k", F.lit(1))
    assert latest_per_key(bounded, ["k"], vertex="b") is bounded


def test_missing_key_column_names_vertex_and_columns(spark):
    stream = spark.readStream.format("rate").load()
    with pytest.raises(PlanError) as err:
        latest_per_key(stream, ["carrier"], order_by="seq", vertex="v")
    assert err.value.vertex == "v"
    assert "carrier" in str(err.value) and "timestamp" in str(err.value)
