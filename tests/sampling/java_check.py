"""Compiling and running a Java check (``tests/sampling/java/*.java``) against the sampling jar:
checks of package-private classes join their package, so they need the jar on the class path."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sparkglass.runtime.sampling.jar import sampling_jar


def run_java_check(source: Path, main_class: str, out: Path) -> None:
    """Compile ``source`` into ``out`` with the sampling jar and Spark's jars, run
    ``main_class``, and assert it printed ``ok`` and exited 0 (else show what it printed)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    classpath = f"{sampling_jar()}:{jars}/*"
    compiled = subprocess.run(
        ["javac", "-nowarn", "-d", str(out), "-cp", classpath, str(source)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert compiled.returncode == 0, compiled.stderr
    run = subprocess.run(
        ["java", "-cp", f"{out}:{classpath}", main_class],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
