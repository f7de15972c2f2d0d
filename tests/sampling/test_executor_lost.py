"""An executor JVM killed during a round: the round ends PARTIAL (local-cluster master)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_lost_executor_gives_partial():
    job = Path(__file__).with_name("lost_executor_job.py")
    proc = subprocess.Popen(
        [sys.executable, str(job)],
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
        pytest.fail(f"local-cluster job timed out:\n{err[-3000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, err[-3000:]
    report = json.loads(lines[-1])
    result = report["result"]
    summary = {k: v for k, v in result.items() if k != "samples"}
    summary["records_per_subtask"] = {
        g["subtaskIndex"]: len(g["records"]) for g in result["samples"]
    }
    assert result["status"] == "PARTIAL", (summary, err[-2000:])
    assert result["errorCode"] == "EXECUTOR_UNREACHABLE"
    # the partitions the killed executor had captured from are named
    assert set(report["seen"][report["victim"]]) <= set(result["failedSubtasks"])
    assert result["failedSubtasks"] and set(result["failedSubtasks"]) <= {0, 1, 2, 3}
    assert result["totalRecordCount"] > 0  # the surviving executor's records
    for group in result["samples"]:
        for record in group["records"]:
            row = json.loads(record["data"])
            assert row["tripled"] == 3 * row["value"]
