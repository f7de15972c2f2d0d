"""The driver plugin's record store of a round (RoundRecords.java), on a real JVM: a Java
check compiled against the sampling jar (package-private classes, so it joins the package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sparkglass.runtime.sampling.jar import sampling_jar

CHECK = Path(__file__).parent / "java" / "RoundRecordsCheck.java"


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_malformed_reports_and_racing_readers(tmp_path: Path) -> None:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    classpath = f"{sampling_jar()}:{jars}/*"
    compiled = subprocess.run(
        ["javac", "-nowarn", "-d", str(tmp_path), "-cp", classpath, str(CHECK)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert compiled.returncode == 0, compiled.stderr
    run = subprocess.run(
        ["java", "-cp", f"{tmp_path}:{classpath}", "io.sparkglass.sampling.RoundRecordsCheck"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
