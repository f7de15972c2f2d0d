"""An executor JVM killed during a round: the round ends PARTIAL (local-cluster master)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_lost_executor_gives_partial(run_job_script):
    report = run_job_script(Path(__file__).with_name("lost_executor_job.py"))
    result = report["result"]
    summary = {k: v for k, v in result.items() if k != "samples"}
    summary["records_per_subtask"] = {
        g["subtaskIndex"]: len(g["records"]) for g in result["samples"]
    }
    assert result["status"] == "PARTIAL", summary
    assert result["errorCode"] == "EXECUTOR_UNREACHABLE"
    # the partitions the killed executor had captured from are named
    assert set(report["seen"][report["victim"]]) <= set(result["failedSubtasks"])
    assert result["failedSubtasks"] and set(result["failedSubtasks"]) <= {0, 1, 2, 3}
    assert result["totalRecordCount"] > 0  # the surviving executor's records
    for group in result["samples"]:
        for record in group["records"]:
            row = json.loads(record["data"])
            assert row["tripled"] == 3 * row["value"]
