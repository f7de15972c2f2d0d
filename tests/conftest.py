"""Shared fixtures: one local SparkSession for the whole test run (one per test is slow)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A real local Spark session (``local[2]``, UI off) shared by every test.

    Sampling is *off* by default (``spark.sparkglass.sampling.enabled=false``) but its jar
    and plugin are loaded; tests that need it set it per pipeline with ``spark.conf.set``.
    """
    from sparkglass.runtime.session import spark_session

    session = spark_session(
        "sparkglass-tests",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        sampling_plugin=True,  # the jar + plugin are loaded; sampling itself stays off
    )
    yield session
    session.stop()
