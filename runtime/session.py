"""Creating the SparkSession a sparkglass pipeline runs in.

Checks Java before Spark tries (so a missing JVM is one clear line, not a Py4J
traceback), points ``PYSPARK_PYTHON`` at the running interpreter, and applies
local-mode defaults suited to one machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from sparkglass.runtime.contract.errors import JAVA_FIX, JavaNotFoundError

#: Spark 4 needs Java 17 or newer.
MIN_JAVA_MAJOR = 17


#: Defaults for one machine; anything in ``conf`` wins.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def java_executable() -> str:
    """Path of the ``java`` Spark will use (``$JAVA_HOME/bin/java`` first, then ``PATH``).

    Raises :class:`JavaNotFoundError` when there is none.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file():
            return str(candidate)
        raise JavaNotFoundError(f"JAVA_HOME={home} has no bin/java: {JAVA_FIX}")
    found = shutil.which("java")
    if not found:
        raise JavaNotFoundError(f"Java not found: Spark needs Java {MIN_JAVA_MAJOR}+; {JAVA_FIX}")
    return found


def java_major_version(java: str | None = None) -> int:
    """Major version of the Java runtime (17 for ``17.0.15``).

    Raises :class:`JavaNotFoundError` when it cannot run or is older than 17.
    """
    java = java or java_executable()
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError as exc:
        raise JavaNotFoundError(f"cannot run {java}: {exc}; {JAVA_FIX}") from exc
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        raise JavaNotFoundError(f"cannot read the version of {java}; {JAVA_FIX}")
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0" style
        major = int(m.group(2))
    if major < MIN_JAVA_MAJOR:
        raise JavaNotFoundError(
            f"{java} is Java {major}; Spark needs {MIN_JAVA_MAJOR}+: {JAVA_FIX}"
        )
    return major


def spark_session(
    app_name: str = "sparkglass",
    *,
    master: str | None = "local[2]",
    conf: Mapping[str, str] | None = None,
    sampling_plugin: bool | None = None,
) -> SparkSession:
    """Get or create a SparkSession with sparkglass defaults.

    ``master=None`` leaves the master to ``spark-submit``. ``conf`` entries override
    :data:`LOCAL_DEFAULTS`. ``sampling_plugin`` loads the sampling jar and plugin (compiled
    on first use, see :mod:`sparkglass.runtime.sampling.jar`); ``None`` means: when ``conf`` sets
    ``spark.sparkglass.sampling.enabled=true``. Load it to switch sampling on later with
    ``spark.conf.set``. Raises :class:`JavaNotFoundError` before Spark starts if there
    is no Java 17+.
    """
    java_major_version()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master and master.startswith("local"):
        # One machine: bind to loopback instead of guessing an interface (and warning).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = dict(LOCAL_DEFAULTS)
    settings.update(conf or {})
    if sampling_plugin is None:
        sampling_plugin = settings.get("spark.sparkglass.sampling.enabled", "").lower() == "true"
    if sampling_plugin:
        settings.update(sampling_plugin_conf(settings))
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def sampling_plugin_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """``spark.jars`` and ``spark.plugins`` entries adding the sampling jar and plugin to ``conf``.

    Existing values are kept (comma-joined). Compiles the jar on first use.
    """
    from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, sampling_jar

    conf = conf or {}
    out: dict[str, str] = {}
    for key, value in (("spark.jars", str(sampling_jar())), ("spark.plugins", PLUGIN_CLASS)):
        existing = [v for v in conf.get(key, "").split(",") if v.strip()]
        if value not in existing:
            existing.append(value)
        out[key] = ",".join(existing)
    return out
