"""A request failing for good fails its task and Spark retries the task (stateless wait).

Runs ``task_retry_job.py`` in a subprocess with master ``local[1,3]`` (task retries on),
because the shared test session is ``local[2]``, where ``spark.task.maxFailures`` is 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_failed_request_fails_the_task_and_spark_retries_it(weather, tmp_path) -> None:
    weather.configure(fail_times=2, fail_keys=["42", "w7"])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    job = Path(__file__).with_name("task_retry_job.py")
    done = subprocess.run(
        [sys.executable, str(job), weather.url, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=480,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Every record once, in order; /echo/42 answered on the third task attempt.
    assert seen["ids"] == list(range(50))
    assert seen["served_42"] == [3]
    reports = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    # The writer's task (holding w7) ran as attempts 0, 1 and 2; the last one wrote all.
    attempts = sorted((r["subtask"], r["attempt"]) for r in reports)
    assert attempts == [(0, 0), (0, 1), (0, 2)]
    final = {r["attempt"]: r for r in reports}
    assert final[2]["completed"] == 50 and final[2]["of"] == 1
