"""Shared fixtures: one local SparkSession for the whole test run (one per test is slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.sampling_settings import SamplingSettings
from tests.support.spark_conf import set_spark_conf as set_spark_conf  # the fixture, by name

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A real local Spark session (``local[2]``, UI off) shared by every test.

    Sampling is *off* by default (``spark.sparkglass.sampling.enabled=false``) but its jar
    and plugin are loaded; tests that need it turn it on with ``tests.support.spark_conf``
    (``spark_conf`` or the ``set_spark_conf`` fixture), which puts it back after them.
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
            out, err = proc.communicate(timeout=480)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"{script.name} timed out:\n{err[-3000:]}")
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, err[-3000:]
        report: dict[str, Any] = json.loads(lines[-1])
        return report

    return run


# --- a scripted RoundTransport: the round coordinator's logic without Spark (sampling, control)
@dataclass
class FakeRound:
    tap_key: str
    window_ms: int
    settings: SamplingSettings
    participants: list[str]
    reported: set[str] = field(default_factory=set)
    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    progress: dict[str, list[int]] = field(default_factory=dict)
    cancelled: bool = False


class FakeTransport:
    """Executors ``alive``; tests call :meth:`report` to deliver an executor's buffers."""

    def __init__(self, executors: tuple[str, ...] = ("1", "2")) -> None:
        self.alive = set(executors)
        self.rounds: dict[str, FakeRound] = {}
        self.forgotten: list[str] = []
        self.auto_report: dict[str, list[dict[str, Any]]] | None = None

    def available(self) -> bool:
        return True

    def start_round(
        self, round_id: str, tap_key: str, settings: SamplingSettings, window_ms: int
    ) -> None:
        self.rounds[round_id] = FakeRound(tap_key, window_ms, settings, sorted(self.alive))
        if self.auto_report is not None:
            for executor, parts in self.auto_report.items():
                self.report(round_id, executor, parts)

    def report(self, round_id: str, executor: str, partitions: list[dict[str, Any]]) -> None:
        rnd = self.rounds[round_id]
        rnd.reported.add(executor)
        rnd.reports[executor] = partitions

    def round_status(self, round_id: str) -> dict[str, Any]:
        rnd = self.rounds.get(round_id)
        if rnd is None:
            return {"known": False}
        return {
            "known": True,
            "participants": rnd.participants,
            "reported": sorted(rnd.reported),
            "alive": sorted(self.alive),
            "progress": rnd.progress,
        }

    def round_reports(self, round_id: str) -> dict[str, list[dict[str, Any]]]:
        return dict(self.rounds[round_id].reports)

    def cancel_round(self, round_id: str) -> None:
        if round_id in self.rounds:
            self.rounds[round_id].cancelled = True

    def forget_round(self, round_id: str) -> None:
        self.forgotten.append(round_id)


def partition(index: int, n: int, *, ts: int = 1000, rate: int = 0, contention: int = 0) -> dict:
    """A report entry for one partition with ``n`` records ``{"i": k}``."""
    return {
        "subtaskIndex": index,
        "records": [
            {"sampleTimestamp": ts + k, "data": f'{{"p":{index},"i":{k}}}', "truncated": False}
            for k in range(n)
        ],
        "droppedByRateLimit": rate,
        "droppedByContention": contention,
    }


@pytest.fixture
def transport() -> FakeTransport:
    return FakeTransport()


@pytest.fixture
def make_partition() -> Callable[..., dict]:
    return partition
