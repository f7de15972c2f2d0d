"""noOutputUntilEndOfInput in use: phases, one reliable materialization, same results."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sparkglass.runtime.contract.attributes import no_output_until_end_of_input
from sparkglass.runtime.contract.errors import PlanError
from sparkglass.runtime.contract.plan import Optimizations
from sparkglass.runtime.pipeline import Pipeline
from tests.support.spark_conf import spark_conf

from .conftest import FLIGHT_SCHEMA

pytestmark = pytest.mark.spark


def parse(flights: DataFrame) -> DataFrame:
    return flights.where(F.col("dep_time").isNotNull()).select(
        "seq", "carrier", "origin", "dest", "dep_delay"
    )


@no_output_until_end_of_input
def busiest_origins(schedule: DataFrame, airports: DataFrame) -> DataFrame:
    counts = schedule.groupBy("origin").agg(F.count(F.lit(1)).alias("departures_2013"))
    names = airports.select(F.col("faa").alias("origin"), F.col("name").alias("origin_name"))
    rank = F.dense_rank().over(Window.orderBy(F.desc("departures_2013")))
    return counts.join(names, "origin", "left").withColumn("origin_rank", rank)


def ranked_names(origins: DataFrame) -> DataFrame:
    """Single input after busiest-origins: inherits end-of-input (chained)."""
    return origins.select("origin", F.upper("origin_name").alias("name_upper"), "origin_rank")


def enrich(parsed: DataFrame, origins: DataFrame) -> DataFrame:
    return parsed.join(origins, "origin", "left")


def build(spark, flight_days: Path, reference: Path, work: Path, table: str) -> Pipeline:
    p = Pipeline("flights", spark, checkpoint_root=work / "checkpoints")
    p.source(
        "flights",
        spark.readStream.schema(FLIGHT_SCHEMA)
        .option("header", "true")
        .option("maxFilesPerTrigger", "1")
        .csv(str(flight_days)),
    )
    p.source("schedule", spark.read.parquet(str(reference / "schedule.parquet")))
    p.source("airports", spark.read.parquet(str(reference / "airports.parquet")))
    p.vertex("parse", "flights", parse)
    p.vertex("busiest-origins", ["schedule", "airports"], busiest_origins)
    p.vertex("ranked-names", "busiest-origins", ranked_names)
    p.vertex("enrich-origin", ["parse", "busiest-origins"], enrich)
    p.sink(
        "enriched",
        "enrich-origin",
        lambda df: df.writeStream.format("memory").queryName(table).outputMode("append"),
    )
    p.sink(
        "names-file",
        "ranked-names",
        lambda df: df.write.mode("overwrite").parquet(str(work / "names")),
    )
    return p


def scanned_paths(plan) -> set[str]:
    """The root paths of every file scan in an executed plan, read from the scan nodes
    themselves: the plan's text cuts a long path at ``spark.sql.maxMetadataStringLength``, of
    whichever session is active on the calling thread."""
    found: set[str] = set()
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.getClass().getSimpleName() == "FileSourceScanExec":
            roots = leaf.relation().location().rootPaths().iterator()
            while roots.hasNext():
                found.add(roots.next().toString())
    return found


def run(spark, flight_days, reference, work: Path, table: str, opts: Optimizations):
    p = build(spark, flight_days, reference, work, table)
    p.start(optimizations=opts)
    try:
        p.process_all_available()
        jquery = p.queries["enriched"]._jsq.streamingQuery()
        scanned = scanned_paths(jquery.lastExecution().executedPlan())
        rows = sorted(tuple(r) for r in spark.table(table).collect())
        names = sorted(tuple(r) for r in spark.read.parquet(str(work / "names")).collect())
    finally:
        p.stop()
    return rows, names, scanned


def test_materialized_static_side_same_results_not_recomputed(
    spark, flight_days, reference, tmp_path
):
    naive = run(
        spark, flight_days, reference, tmp_path / "naive", "naive_enriched",
        Optimizations(materialize=False),
    )  # fmt: skip
    planned = run(spark, flight_days, reference, tmp_path / "planned", "planned_enriched",
                  Optimizations())  # fmt: skip
    assert planned[0] == naive[0]
    assert len(planned[0]) > 2000  # three days of real flights went through
    assert planned[1] == naive[1]
    # Naive: every micro-batch rescans and re-aggregates the 2013 timetable.
    assert any(path.endswith("/schedule.parquet") for path in naive[2]), naive[2]
    # Planned: the stream joins the files written once by phase 0.
    assert not any(path.endswith("/schedule.parquet") for path in planned[2]), planned[2]
    assert any(path.endswith("_materialized/busiest-origins") for path in planned[2]), planned[2]
    # Only the chain tail and the vertex with a blocking edge are written.
    written = {d.name for d in (tmp_path / "planned/checkpoints/_materialized").iterdir()}
    assert written == {"busiest-origins", "ranked-names"}


def test_plan_of_the_pipeline(spark, flight_days, reference, tmp_path):
    p = build(spark, flight_days, reference, tmp_path, "unused")
    plan = p.plan()
    assert plan.vertex("ranked-names").inherited_from == "busiest-origins"
    assert plan.edge("busiest-origins", "ranked-names").kind.value == "pipelined"
    assert plan.edge("busiest-origins", "enrich-origin").kind.value == "blocking"
    assert plan.phases[1].streaming_sinks == ["enriched"]
    assert plan.phases[1].batch_sinks == ["names-file"]


def test_start_refuses_end_of_input_on_a_stream(spark, flight_days, reference, tmp_path):
    p = build(spark, flight_days, reference, tmp_path, "never")
    with pytest.raises(PlanError) as err:
        p.start(overrides={"parse": {"noOutputUntilEndOfInput": True}})
    assert (err.value.vertex, err.value.source) == ("parse", "flights")
    assert p.queries == {}


def test_overrides_from_spark_conf(spark, flight_days, reference, tmp_path):
    from sparkglass.runtime.contract.attributes import OVERRIDES_CONF

    p = build(spark, flight_days, reference, tmp_path, "conf_never")
    overrides = "pipeline: {vertices: [{name: parse, attributes: {nope: 1}}]}"
    with (
        spark_conf(spark, {OVERRIDES_CONF: overrides}),
        pytest.raises(PlanError, match="unknown attribute 'nope'"),
    ):
        p.start()
