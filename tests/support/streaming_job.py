"""The plain Structured Streaming job of ``tests/sampling/plain_streaming_job.py``, run under
``spark-submit`` in its own process with the sampling jar (``spark.sql.extensions`` is a
static conf the shared test session does not have); its events as JSON lines, its commands
through a file, its control token."""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

import sparkglass
from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, sampling_jar

JOB = Path(__file__).resolve().parents[1] / "sampling" / "plain_streaming_job.py"


@dataclass
class Job:
    proc: subprocess.Popen[str]
    lines: queue.Queue[str]
    stderr: list[str]
    command_file: Path

    def event(self, name: str, timeout: float = 180) -> dict[str, Any]:
        """The next JSON line of event ``name`` (fails on an ``error`` event or exit)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {name!r} from the job:\n{''.join(self.stderr)[-3000:]}")
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    pytest.fail(f"job exited:\n{''.join(self.stderr)[-3000:]}")
                continue
            if not line.startswith("{"):
                continue
            data: dict[str, Any] = json.loads(line)
            if data.get("event") == "error":
                pytest.fail(f"job: {data['message']}\n{''.join(self.stderr)[-3000:]}")
            if data.get("event") == name:
                return data

    def send(self, command: str) -> None:
        """Hand the job a command (renamed into place: the job never reads half of one)."""
        staged = self.command_file.with_suffix(".tmp")
        staged.write_text(command)
        staged.replace(self.command_file)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:  # a clean stop first; a loaded machine may take longer: then the group dies
                self.send("stop")
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_job(
    conf: dict[str, str],
    workdir: Path,
    sql: str | None = None,
    *,
    jar: Path | None = None,
    sparkglass_root: Path | None = None,
    env: dict[str, str] | None = None,
) -> Job:
    """``spark-submit`` the job with the sampling jar and ``conf`` (``sql``: the query named
    ``doubler``, over the view ``ticks``, instead of the job's own). ``jar``: another
    sampling jar; ``sparkglass_root``: the folder holding the ``sparkglass`` package the job
    imports (default: this checkout's); ``env``: more environment variables."""
    command_file = workdir / "command"
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    src = str(sparkglass_root or Path(sparkglass.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "SG_JOB_COMMANDS": str(command_file),
        **(env or {}),
    }
    if sql is not None:
        env["SG_JOB_SQL"] = sql
    args = [str(spark_submit), "--master", "local[2]", "--jars", str(jar or sampling_jar())]
    base = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.plugins": PLUGIN_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
    }
    for key, value in {**base, **conf}.items():
        args += ["--conf", f"{key}={value}"]
    proc = subprocess.Popen(
        [*args, str(JOB)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the cleanup reaches the JVM
    )
    lines: queue.Queue[str] = queue.Queue()
    stderr: list[str] = []

    def pump(stream: Any, sink: Any) -> None:
        for line in stream:
            sink(line)

    assert proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=pump, args=(proc.stdout, lines.put), daemon=True).start()
    threading.Thread(target=pump, args=(proc.stderr, stderr.append), daemon=True).start()
    return Job(proc, lines, stderr, command_file)


TOKEN = secrets.token_urlsafe(16)
