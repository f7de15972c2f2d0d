"""not_cache_record in use: adjacent Python batch vertices fused into one pass."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import DataFrame
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from sparkglass.runtime.contract.attributes import not_cache_record
from sparkglass.runtime.contract.plan import Optimizations
from sparkglass.runtime.pipeline import Pipeline

from .conftest import FLIGHT_SCHEMA

pytestmark = pytest.mark.spark

BASE = StructType(
    [
        StructField("seq", LongType()),
        StructField("carrier", StringType()),
        StructField("distance", DoubleType()),
        StructField("dep_delay", DoubleType()),
    ]
)
KM = StructType([*BASE.fields, StructField("km", DoubleType())])
HOURS = StructType([*KM.fields, StructField("delay_hours", DoubleType())])
OUT = StructType(
    [StructField("seq", LongType()), StructField("carrier", StringType()),
     StructField("km_per_delay_hour", DoubleType())]
)  # fmt: skip


@not_cache_record
def to_km(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("km", pc.multiply(batch.column("distance"), 1.609344))


@not_cache_record
def delay_hours(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("delay_hours", pc.divide(batch.column("dep_delay"), 60.0))


@not_cache_record
def ratio(batch: pa.RecordBatch) -> pa.RecordBatch:
    hours = pc.max_element_wise(batch.column("delay_hours"), 0.5)
    value = pc.divide(batch.column("km"), hours)
    return pa.RecordBatch.from_arrays(
        [batch.column("seq"), batch.column("carrier"), value], schema=pa.schema(
            [("seq", pa.int64()), ("carrier", pa.string()), ("km_per_delay_hour", pa.float64())]
        )
    )  # fmt: skip


def plain_delay_hours(batch: pa.RecordBatch) -> pa.RecordBatch:
    return delay_hours(batch)


def build(spark, days: Path, out: Path, middle=delay_hours) -> Pipeline:
    p = Pipeline("chain", spark)
    raw = spark.read.schema(FLIGHT_SCHEMA).option("header", "true").csv(str(days))
    p.source("flights", raw)
    p.vertex("select", "flights", lambda df: df.select(*BASE.names))
    p.python_vertex("to-km", "select", to_km, KM)
    p.python_vertex("delay-hours", "to-km", middle, HOURS)
    p.python_vertex("ratio", "delay-hours", ratio, OUT)
    p.sink("out", "ratio", lambda df: df.write.mode("overwrite").parquet(str(out)))
    return p


def arrow_passes(df: DataFrame) -> int:
    return str(df._jdf.queryExecution().executedPlan().toString()).count("MapInArrow")


def run(spark, days: Path, out: Path, opts: Optimizations, middle=delay_hours):
    p = build(spark, days, out, middle)
    p.start(optimizations=opts)
    passes = arrow_passes(p.output("ratio"))
    p.stop()
    rows = sorted(tuple(r) for r in spark.read.parquet(str(out)).collect())
    return p, rows, passes


def test_fused_chain_same_results_one_pass(spark, flight_days, tmp_path):
    p, fused, fused_passes = run(spark, flight_days, tmp_path / "f", Optimizations())
    _, unfused, unfused_passes = run(spark, flight_days, tmp_path / "u", Optimizations(fuse=False))
    assert fused == unfused
    assert len(fused) > 2000
    assert (fused_passes, unfused_passes) == (1, 3)
    plan = p.plan()
    assert [g.vertices for g in plan.fusions] == [["to-km", "delay-hours", "ratio"]]
    assert plan.vertex("select").fusion_group is None  # a JVM vertex


def test_without_the_attribute_no_fusion(spark, flight_days, tmp_path):
    _, rows, passes = run(
        spark, flight_days, tmp_path / "n", Optimizations(), middle=plain_delay_hours
    )
    assert passes == 3
    assert len(rows) > 2000


def test_wrong_intermediate_schema_fails_naming_the_vertex(spark, flight_days, tmp_path):
    @not_cache_record
    def broken(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.append_column("oops", pc.divide(batch.column("dep_delay"), 60.0))

    p = build(spark, flight_days, tmp_path / "x", middle=broken)
    with pytest.raises(Exception, match="vertex 'delay-hours' returned columns"):
        p.start()
    p.stop()
