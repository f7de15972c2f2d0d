"""A materialized end-of-input output survives the loss of an executor (real JVMs)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_materialized_output_survives_executor_loss_without_its_sources(run_job_script):
    report = run_job_script(Path(__file__).with_name("lost_executor_materialize_job.py"))
    assert report["executors"] == 2
    assert report["rows"] > 1500
    assert report["equal"], report
    assert report["ranked"] == report["rows"]  # every flight found its origin's rank
