"""``make bench-service`` splits the cores between the demo's Spark and the service side
(``bench/service_bench.py``: ``cpu_partition``): a child process inherits the side it was
started on. Real processes, real Linux affinity; no Spark, no service."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import service_bench  # noqa: E402

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux CPU affinity and at least 2 cores",
)

CHILD_CORES = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]


def test_the_service_side_and_its_children_get_every_core_but_the_last() -> None:
    before = os.sched_getaffinity(0)
    try:
        split = service_bench.cpu_partition(True)
        assert split is not None
        cores = sorted(before)
        assert split == {"spark": cores[-1:], "service_and_load": cores[:-1]}
        child = subprocess.run(CHILD_CORES, capture_output=True, text=True, check=True)
        assert child.stdout.strip() == str(cores[:-1])  # e.g. the service, the anchor
    finally:
        os.sched_setaffinity(0, before)


def test_off_or_against_a_running_service_nothing_is_pinned() -> None:
    before = os.sched_getaffinity(0)
    assert service_bench.cpu_partition(False) is None
    assert os.sched_getaffinity(0) == before
