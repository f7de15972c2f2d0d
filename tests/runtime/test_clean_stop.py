"""Pipeline.stop() ends its queries without ERROR lines: it lets a running micro-batch end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_stop_during_a_micro_batch_logs_no_error() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("stop_mid_batch_job.py"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=480)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job did not end:\n{err[-3000:]}")
    assert proc.returncode == 0, err[-3000:]
    report = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    assert report["stopped"] is True
    errors = [line for line in err.splitlines() if re.search(r"\bERROR\b", line)]
    assert not errors, "\n".join(errors[:20])
