"""Shared fixtures: one local SparkSession for the whole test run (one per test is slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def run_job_script() -> Callable[[Path], dict[str, Any]]:
    """Run a Spark job script in its own process group; return its last JSON line.

    For tests that need their own master (``local-cluster`` with separate executor JVMs,
    which they kill). Fails the test, and kills the job's whole process group, after 240 s.
    """

    def run(script: Path) -> dict[str, Any]:
        proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: the cleanup below reaches the JVMs
        )
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{script.name} timed out:\n{err[-3000:]}")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, err[-3000:]
        report: dict[str, Any] = json.loads(lines[-1])
        return report

    return run
