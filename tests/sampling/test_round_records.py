"""The driver plugin's record store of a round (RoundRecords.java), on a real JVM: a Java
check compiled against the sampling jar (package-private classes, so it joins the package)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.sampling.java_check import run_java_check

CHECK = Path(__file__).parent / "java" / "RoundRecordsCheck.java"


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac)")
def test_malformed_reports_and_racing_readers(tmp_path: Path) -> None:
    run_java_check(CHECK, "io.sparkglass.sampling.RoundRecordsCheck", tmp_path)
