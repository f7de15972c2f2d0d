"""The wheel carries the sampling jar prebuilt: a job runs and is sampled with a JRE only.

The wheel is built from this checkout by the project's build backend (build_support/),
unpacked, and imported by a plain streaming job under ``spark-submit`` whose ``JAVA_HOME``
holds ``java`` and no ``javac``, with a ``javac`` first on ``PATH`` that only records that
it was called, and an empty jar cache: the job finds the wheel's jar and never compiles.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.control.client import ControlClient
from sparkglass.runtime.sampling.jar import jar_fits, jar_manifest, source_hash, spark_version
from tests.support.streaming_job import TOKEN, start_job
from tests.support.wheel_build import REPO, build_wheel

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

JAR_IN_WHEEL = "sparkglass/runtime/jvm/sparkglass-sampling.jar"
#: The lower bound of the runtime's pyspark range (pyproject.toml), which the build compiles
#: against.
_LOWER = re.search(r'"pyspark>=(\d+\.\d+)', (REPO / "pyproject.toml").read_text())
assert _LOWER, "pyproject.toml names no pyspark>=X.Y"
OLDEST_SPARK = _LOWER[1]


def _real_java() -> Path:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else Path(shutil.which("java") or "")
    assert java.is_file(), "the test needs java"
    return java.resolve()


def test_a_job_is_sampled_with_the_wheel_s_jar_and_no_javac(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "build")
    with zipfile.ZipFile(wheel) as archive:
        assert JAR_IN_WHEEL in archive.namelist(), archive.namelist()
        site = tmp_path / "site"
        archive.extractall(site)
    packaged = site / JAR_IN_WHEEL
    manifest = jar_manifest(packaged)
    assert manifest["Source-Hash"] == source_hash()
    # Compiled against the oldest supported minor (pyproject's pyspark>=X.Y), and loaded by
    # the running Spark all the same (4.3 in this venv at the time of writing).
    assert manifest["Spark-Version"].startswith(f"{OLDEST_SPARK}."), manifest
    assert jar_fits(manifest["Spark-Version"], spark_version())
    assert manifest["Implementation-Version"] != "0.0.0"  # the project's, not a placeholder

    # A JRE: java, no javac. And a javac on PATH that leaves a mark if anything calls it.
    jre = tmp_path / "jre" / "bin"
    jre.mkdir(parents=True)
    (jre / "java").symlink_to(_real_java())
    trap = tmp_path / "trap"
    trap.mkdir()
    called = tmp_path / "javac-called"
    (trap / "javac").write_text(f'#!/bin/sh\necho "$@" >> {called}\nexit 1\n')
    (trap / "javac").chmod(0o755)
    env = {
        "JAVA_HOME": str(jre.parent),
        "PATH": os.pathsep.join([str(trap), os.environ["PATH"]]),
        "SPARKGLASS_JAR_CACHE": str(tmp_path / "empty-cache"),
    }

    found = subprocess.run(
        [sys.executable, "-c",
         "from sparkglass.runtime.sampling.jar import sampling_jar; print(sampling_jar())"],
        env={**os.environ, **env, "PYTHONPATH": str(site)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == packaged

    job = start_job(
        {"spark.sparkglass.sampling.enabled": "true", "spark.sparkglass.control.token": TOKEN},
        tmp_path,
        jar=packaged,
        sparkglass_root=site,
        env=env,
    )
    try:
        ready = job.event("ready")
        with ControlClient(ready["url"], TOKEN) as client:
            opened = client.open_round("doubler", "2s")
            assert opened.round_id is not None, opened
            result = client.wait_for_round(opened.round_id, timeout_s=90, poll_interval_s=0.25)
        assert result.status is SampleStatus.COMPLETE, result
        rows = [json.loads(r.data) for s in result.samples for r in s.records]
        assert rows and all(r["doubled"] == 2 * r["value"] for r in rows)
    finally:
        job.stop()
    assert not called.exists(), f"javac was called: {called.read_text()}"
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir())
