"""A materialized end-of-input output survives the loss of an executor (real JVMs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_materialized_output_survives_executor_loss_without_its_sources():
    job = Path(__file__).with_name("lost_executor_materialize_job.py")
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
    assert report["executors"] == 2
    assert report["rows"] > 1500
    assert report["equal"], report
    assert report["ranked"] == report["rows"]  # every flight found its origin's rank
