"""Rounds fit Spark's micro-batches: with micro-batches 5 s apart and a 2 s window, every
round sees one (local-cluster master, separate executor JVMs)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_ten_rounds_out_of_ten_get_rows_between_sparse_micro_batches(run_job_script):
    report = run_job_script(Path(__file__).with_name("sparse_micro_batches_job.py"))
    rounds = report["rounds"]
    assert len(rounds) == 10
    assert [r["status"] for r in rounds] == ["COMPLETE"] * 10, rounds
    assert all(r["records"] > 0 for r in rounds), rounds
    # A round waits for the next micro-batch (at most 5 s away), not for its 60 s timeout.
    assert all(r["seconds"] < 25 for r in rounds), rounds
