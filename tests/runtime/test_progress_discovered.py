"""Live metrics of a plain Structured Streaming job sampled through ``attach`` (a discovered
pipeline: the same path as a Spark Declarative Pipeline run), on real Spark, read over real
HTTP from the driver control endpoint.

The job runs under ``spark-submit`` in its own process (``spark.sql.extensions`` is a static
conf the shared test session does not have); this file is also its script (``__main__``).
Two named queries: ``counted`` (``rate-micro-batch``, exactly 20 rows per micro-batch, into a
memory table) and ``windowed`` (a 1-second window count with a watermark: event time and
state). Spark keeps 5 progress updates per query (``numRecentProgressUpdates``) and the
sampling jar's tracker 64 micro-batches: the job runs ``counted`` well past both.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS_PER_BATCH = 20
#: ``counted`` runs at least this many micro-batches before the tests look (> 64 kept by the
#: tracker, > 5 kept by Spark).
MIN_BATCHES = 75
RECENT_PROGRESS = 5
HISTORY_MINUTES = 1
HISTORY_POINTS = 20


# ------------------------------------------------------------------------------ the job
def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _wait(condition: Any, what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            _emit("error", message=f"timed out waiting for {what}")
            sys.exit(1)
        time.sleep(0.05)


def _job() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import sparkglass.runtime
    from sparkglass.runtime.sampling.registry import endpoint_for

    spark = SparkSession.builder.getOrCreate()
    ticks = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", ROWS_PER_BATCH)
    ticks.option("numPartitions", 2).load().createOrReplaceTempView("ticks")
    counted = (
        spark.sql("SELECT value, timestamp FROM ticks")
        .writeStream.format("memory")
        .queryName("counted")
        .trigger(processingTime="50 milliseconds")
        .start()
    )
    events = spark.readStream.format("rate").option("rowsPerSecond", 40)
    events.option("numPartitions", 2).load().createOrReplaceTempView("events")
    windowed = (
        spark.table("events")
        .withWatermark("timestamp", "1 second")
        .groupBy(F.window("timestamp", "1 second"))
        .count()
        .writeStream.format("noop")
        .outputMode("append")
        .queryName("windowed")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    attached = sparkglass.runtime.attach(spark)

    def batch_id(query: Any) -> int:
        last = query.lastProgress
        return -1 if last is None else int(last["batchId"])

    _wait(lambda: batch_id(counted) >= MIN_BATCHES and batch_id(windowed) >= 5, "micro-batches")
    endpoint = endpoint_for(spark)
    _emit(
        "ready",
        attached=attached is not None,
        url=endpoint.url if endpoint is not None else None,
        recent=len(counted.recentProgress),
    )
    commands = Path(os.environ["SG_JOB_COMMANDS"])
    while True:
        if not commands.exists():
            time.sleep(0.05)
            continue
        command = commands.read_text().strip()
        commands.unlink()
        if command == "stop":
            break
        if command == "stop-counted":
            counted.stop()
            tracker = spark._jvm.io.sparkglass.extensions.QueryTracker  # type: ignore[union-attr]
            # The tracker saw the query end: every progress before it was delivered too.
            _wait(lambda t=tracker: not json.loads(str(t.json()))["counted"]["running"], "end")
            _emit(
                "counted",
                rows=spark.table("counted").count(),
                batches=batch_id(counted) + 1,
            )
    windowed.stop()
    spark.stop()


# ---------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The job with sampling on, and its ``ready`` event."""
    import subprocess
    import threading
    from queue import Queue

    import pyspark

    import sparkglass
    from sparkglass.runtime.sampling.discovery import EXTENSIONS_CLASS
    from sparkglass.runtime.sampling.jar import PLUGIN_CLASS, sampling_jar
    from tests.support.streaming_job import TOKEN, Job

    workdir = tmp_path_factory.mktemp("discovered-progress")
    command_file = workdir / "command"
    src = str(Path(sparkglass.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "SG_JOB_COMMANDS": str(command_file),
    }
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.plugins": PLUGIN_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
        "spark.sparkglass.sampling.enabled": "true",
        "spark.sparkglass.control.token": TOKEN,
        "spark.sql.streaming.numRecentProgressUpdates": str(RECENT_PROGRESS),
        "spark.sparkglass.progress.historyMinutes": str(HISTORY_MINUTES),
        "spark.sparkglass.progress.historyPoints": str(HISTORY_POINTS),
    }
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    args = [str(spark_submit), "--master", "local[2]", "--jars", str(sampling_jar())]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    proc = subprocess.Popen(
        [*args, __file__],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    lines: Queue[str] = Queue()
    stderr: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    threading.Thread(target=lambda: [stderr.append(x) for x in proc.stderr], daemon=True).start()
    running = Job(proc, lines, stderr, command_file)
    try:
        ready = running.event("ready", timeout=300)
        assert ready["attached"] and ready["url"], ready
        yield running, ready
    finally:
        running.stop()


def progress(ready: dict[str, Any], history: bool = False) -> Any:
    from sparkglass.runtime.control.client import ControlClient
    from tests.support.streaming_job import TOKEN

    with ControlClient(ready["url"], TOKEN) as client:
        return client.progress(history=True) if history else client.progress()


def test_headline_rates_agree_with_the_vertices(job: tuple[Any, dict[str, Any]]) -> None:
    """Before: the headline read 0.0 rows/s while the vertex showed 20/s."""
    _, ready = job
    m = progress(ready)
    counted = m.vertices["counted"]
    assert counted.rows_last_micro_batch == ROWS_PER_BATCH
    assert counted.rows_per_second > 0
    # The headline is the largest of the queries' rates, the vertex's among them: counted
    # passes its input through, so its input rate is the vertex's rate (same micro-batch,
    # same interval).
    assert m.input_rows_per_second > 0 and m.processed_rows_per_second > 0
    assert m.input_rows_per_second >= counted.rows_per_second * (1 - 1e-9)
    assert counted.processed_rows_per_second is not None
    assert counted.processed_rows_per_second > 0


def test_batch_duration_latency_watermark_and_state_rows(
    job: tuple[Any, dict[str, Any]],
) -> None:
    _, ready = job
    deadline = time.monotonic() + 60
    while True:  # the watermark moves once the first windows' events are in
        m = progress(ready)
        windowed = m.vertices["windowed"]
        if windowed.event_time_watermark:
            break
        assert time.monotonic() < deadline, windowed
        time.sleep(0.5)
    now_ms = time.time() * 1000
    assert windowed.batch_duration_ms is not None and windowed.batch_duration_ms > 0
    assert windowed.latency_ms is not None
    assert windowed.latency_ms >= windowed.batch_duration_ms
    assert now_ms - 120_000 < windowed.event_time_watermark <= now_ms
    assert windowed.state_rows is not None and windowed.state_rows >= 1
    counted = m.vertices["counted"]  # no watermark, no state: unknown, not 0
    assert counted.event_time_watermark is None and counted.state_rows is None
    assert counted.batch_duration_ms is not None and counted.batch_duration_ms > 0
    # The pipeline's: the longest duration and latency, the earliest watermark, all state.
    assert m.batch_duration_ms is not None
    assert m.batch_duration_ms >= max(windowed.batch_duration_ms, counted.batch_duration_ms)
    assert m.event_time_watermark == windowed.event_time_watermark
    assert m.state_rows == windowed.state_rows


def test_history_of_the_last_minutes(job: tuple[Any, dict[str, Any]]) -> None:
    _, ready = job
    h = progress(ready, history=True).history
    assert h is not None
    assert (h.window_seconds, h.max_points) == (HISTORY_MINUTES * 60, HISTORY_POINTS)
    assert h.resolution_seconds == HISTORY_MINUTES * 60 / HISTORY_POINTS
    assert 2 <= len(h.timestamps) <= HISTORY_POINTS
    now_ms = time.time() * 1000
    assert all(now_ms - 61_000 <= t <= now_ms + 1000 for t in h.timestamps)
    assert h.timestamps == sorted(h.timestamps)
    rows = [r for r in h.vertices["counted"].rows_total if r is not None]
    assert len(rows) >= 2 and rows == sorted(rows) and rows[-1] > rows[0]
    assert any(x for x in h.input_rows_per_second)
    assert any(x is not None for x in h.vertices["windowed"].state_rows)
    # Without asking: no history (the operator copies this answer into the status).
    assert progress(ready).history is None


def test_rows_total_keeps_growing_past_the_recent_progress_window(
    job: tuple[Any, dict[str, Any]],
) -> None:
    """Before: rowsTotal was the sum of the tracker's last 64 micro-batches (1,280 rows)."""
    running, ready = job
    assert ready["recent"] <= RECENT_PROGRESS
    running.send("stop-counted")
    truth = running.event("counted", timeout=120)
    batches = truth["batches"]  # micro-batches that reported their progress
    assert batches > max(64, 10 * RECENT_PROGRESS)  # past the tracker's, and Spark's, window
    # The memory table holds every row of them (and of a last one stop() cut short after its
    # commit, before its progress: no listener hears of that one).
    assert truth["rows"] in (ROWS_PER_BATCH * batches, ROWS_PER_BATCH * (batches + 1))
    m = progress(ready)
    counted = m.vertices["counted"]
    assert counted.rows_total == ROWS_PER_BATCH * batches
    # A stopped query reads nothing: its rates are 0, the other query's carry the headline.
    assert counted.rows_per_second == 0


if __name__ == "__main__":
    _job()
