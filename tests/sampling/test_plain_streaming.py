"""A plain Structured Streaming job sampled by configuration (plus ``attach``), on real Spark.

The job (``plain_streaming_job.py``) runs under ``spark-submit`` in its own process, because
``spark.sql.extensions`` is a static conf the shared test session does not have. The tests
talk to its control endpoint over HTTP, as the service and the CLI do.
"""

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

import sparkglass
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.control.client import ControlClient
from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, sampling_jar

pytestmark = pytest.mark.spark

JOB = Path(__file__).with_name("plain_streaming_job.py")


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


def start_job(conf: dict[str, str], workdir: Path, sql: str | None = None) -> Job:
    """``spark-submit`` the job with the sampling jar and ``conf`` (``sql``: the query named
    ``doubler``, over the view ``ticks``, instead of the job's own)."""
    command_file = workdir / "command"
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    src = str(Path(sparkglass.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "SG_JOB_COMMANDS": str(command_file),
    }
    if sql is not None:
        env["SG_JOB_SQL"] = sql
    args = [str(spark_submit), "--master", "local[2]", "--jars", str(sampling_jar())]
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


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Job, dict[str, Any]]]:
    """The job with sampling on, and its ``ready`` event."""
    job = start_job(
        {"spark.sparkglass.sampling.enabled": "true", "spark.sparkglass.control.token": TOKEN},
        tmp_path_factory.mktemp("sampled"),
    )
    try:
        yield job, job.event("ready")
    finally:
        job.stop()


def rows(result: Any) -> list[dict[str, Any]]:
    return [json.loads(r.data) for s in result.samples for r in s.records]


def sample(client: ControlClient, vertex: str) -> Any:
    opened = client.open_round(vertex, "2s")
    assert opened.status is SampleStatus.PENDING, opened
    assert opened.round_id is not None
    return client.wait_for_round(opened.round_id, timeout_s=90, poll_interval_s=0.25)


def test_a_query_is_sampled_by_query_name_with_configuration_and_attach(
    sampled: tuple[Job, dict[str, Any]],
) -> None:
    _, ready = sampled
    assert ready["attached"] and ready["url"]
    assert not ready["dslImported"], "the job must not need the DSL"
    assert sorted(ready["taps"]) == ["query/doubler", "view/ticks"]
    # The native gate by default (test_native_gate.py: the UDF gate with nativeGate=false).
    assert "sg_tap_gate_native(query/doubler)" in ready["plan"], ready["plan"]
    with ControlClient(ready["url"], TOKEN) as client:
        description = client.pipeline()
        by_name = {v.name: v for v in description.vertices}
        assert by_name["doubler"].inputs == ["ticks"]
        assert by_name["ticks"].kind.value == "source" and not by_name["ticks"].bounded
        result = sample(client, "doubler")
        assert result.status is SampleStatus.COMPLETE, result
        got = rows(result)
        assert got and all(r["doubled"] == 2 * r["value"] for r in got)
        types = {r.data_type for s in result.samples for r in s.records}
        assert types == {"struct<value:bigint,doubled:bigint>"}
        view = sample(client, "ticks")
        assert view.status is SampleStatus.COMPLETE, view
        assert {"timestamp", "value"} == set(rows(view)[0])


def test_an_exception_in_the_tap_path_is_swallowed_and_counted(
    sampled: tuple[Job, dict[str, Any]],
) -> None:
    job, ready = sampled
    job.send("fault")
    fault = job.event("fault")
    assert fault["tapErrors"] > fault["tapErrorsBefore"], fault
    assert "program" in (fault["lastTapError"] or ""), fault
    assert fault["active"] and fault["exception"] is None, fault
    assert fault["batches"] >= 3
    with ControlClient(ready["url"], TOKEN) as client:  # and sampling still works after it
        result = sample(client, "doubler")
        assert result.status is SampleStatus.COMPLETE, result


def test_sampling_off_by_default_installs_nothing(tmp_path: Path) -> None:
    job = start_job({}, tmp_path)  # jar, plugin and extension loaded; enabled not set
    try:
        ready = job.event("ready")
    finally:
        job.stop()
    assert not ready["attached"] and ready["url"] is None
    assert ready["taps"] == []
    assert "sg_tap" not in ready["plan"], ready["plan"]
