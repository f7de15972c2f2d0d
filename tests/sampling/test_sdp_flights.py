"""examples/sdp-flights run by ``sparkglass pipelines run``: every dataset sampled.

One real ``spark-pipelines`` run (Spark Connect server in the launcher's process), reused for
every assertion: the live streaming flow is sampled through its tap while it runs; once the
(triggered) run ended, every dataset, materialized views and the ``@dp.append_flow`` target
included, is sampled from its table (end-of-input); the description has the flow -> dataset
edge and the attributes declared by decorators or given with ``--attributes``.

The same run proves the live metrics true: ``flights_raw`` reads one file per micro-batch, 70
files of 10 flights, past the 64 micro-batches the sampling jar's tracker keeps (``rowsTotal``
was their sum) and past Spark's ``recentProgress`` (cut to 5 here); while the flow runs the
headline input rate is not 0 when the flow shows rows (it was), and once the run ended every
row is counted and the last minutes are kept.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import sparkglass
from sparkglass.runtime.contract.description import VertexAttributes
from sparkglass.runtime.contract.sample_result import NoDataReason, SampleStatus
from sparkglass.runtime.control.client import ControlClient, ControlRejected
from sparkglass.runtime.sampling.sdp import ENDED, HOLD_ENV, READY_FILE_ENV

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdp-flights"
TOKEN = "sdp-test-token"
#: Every dataset of the example (vertex name) and the columns of its rows.
DATASETS = {
    "flights-raw": [
        "year", "month", "day", "dep_delay", "arr_delay", "carrier", "flight", "origin", "dest"
    ],
    "delayed-flights": ["carrier", "flight", "origin", "dest", "dep_delay", "arr_delay"],
    "origin-counts": ["origin", "count"],
    "carrier-delays": ["carrier", "late_flights", "avg_delay"],
    "late-arrivals": ["carrier", "flight", "origin", "dest", "arr_delay"],
}  # fmt: skip
#: The flow that feeds ``late-arrivals`` (``@dp.append_flow``): a vertex of its own.
APPEND_FLOW = "late-arrivals-from-raw"
#: Files the example's streaming table reads, one per micro-batch: more than the tracker's 64.
FILES, ROWS_PER_FILE = 70, 10


def prepare(root: Path) -> None:
    spec = importlib.util.spec_from_file_location("sdp_prepare", root / "prepare.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.prepare(files=FILES, rows_per_file=ROWS_PER_FILE, root=root)


def until(
    what: str,
    condition: Any,
    timeout: float,
    proc: subprocess.Popen[bytes],
    log: Path | None = None,
) -> Any:
    """``condition()`` once true; fails (with the end of the run's ``log``) when the run
    exits first or ``timeout`` s pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
            pytest.fail(f"the run exited ({proc.returncode}) before {what}:\n{tail}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def sample(client: ControlClient, vertex: str) -> Any:
    """One 2 s round; ``None`` while the vertex is not listed yet."""
    try:
        opened = client.open_round(vertex, "2s")
    except ControlRejected as exc:
        if exc.status == 404:
            return None
        raise
    if opened.round_id is None:
        return opened
    return client.wait_for_round(opened.round_id, timeout_s=60, poll_interval_s=0.25)


def test_every_dataset_of_the_sdp_example_is_sampled(tmp_path: Path) -> None:
    project = tmp_path / "sdp-flights"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("data", "__pycache__"))
    spec = (project / "spark-pipeline.yml").read_text()
    spec = spec.replace(
        "file:///tmp/sparkglass-sdp-flights/storage", (tmp_path / "storage").as_uri()
    )
    (project / "spark-pipeline.yml").write_text(spec)
    prepare(project)
    ready = tmp_path / "ready.json"
    src = str(Path(sparkglass.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "SPARKGLASS_CONTROL_TOKEN": TOKEN,
        READY_FILE_ENV: str(ready),
        HOLD_ENV: "60",
    }
    cmd = [
        sys.executable, "-m", "sparkglass", "pipelines", "run", "--hold", "60",
        "--spec", str(project / "spark-pipeline.yml"),
        "--attributes", str(project / "sparkglass-attributes.yml"),
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.sql.warehouse.dir={tmp_path / 'warehouse'}",
        "--conf", "spark.sql.streaming.numRecentProgressUpdates=5",
    ]  # fmt: skip
    log_path = tmp_path / "run.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        cmd, cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        until("the control endpoint", ready.exists, 180, proc, log_path)
        url = json.loads(ready.read_text())["url"]
        with ControlClient(url, TOKEN) as client:
            # While the streaming flow runs (one file per micro-batch), its tap serves rounds.
            # (The vertex is listed from the run's events before the flow's query starts:
            # DISABLED until its tap is placed.)
            # On a busy machine the flow may run no micro-batch while a round waits for one
            # (its first can take half a minute under load): that round ends NO_DATA with
            # NO_MICRO_BATCH, the documented answer, and the next round is asked for. Every
            # micro-batch reads a file of rows, so one running while a round is open is sampled.
            waited: list[Any] = []

            def live_round() -> Any:
                r = sample(client, "flights-raw")
                if r is None or r.status is SampleStatus.DISABLED:
                    return None
                if (
                    r.status is SampleStatus.NO_DATA
                    and r.no_data_reason is NoDataReason.NO_MICRO_BATCH
                ):
                    waited.append(r)
                    return None
                return r

            live = until("a live round on the flights_raw flow", live_round, 180, proc)
            assert live.status is SampleStatus.COMPLETE, (live, waited)
            assert live.total_record_count > 0 and live.materialized_at is None
            # Every dataset and flow is listed (from the run's events and the taps).
            listed = lambda: set(DATASETS) | {APPEND_FLOW} <= set(client.vertices())  # noqa: E731
            until("every dataset listed", listed, 120, proc)

            def flowing() -> Any:
                m = client.progress()
                raw = m.vertices.get("flights-raw")
                if raw is not None and raw.rows_per_second > 0:
                    return m
                assert ENDED not in log_path.read_text(), f"no rows/s seen in the run: {m}"
                return None

            moving = until("rows/s through flights_raw", flowing, 240, proc, log_path)
            raw = moving.vertices["flights-raw"]
            assert moving.input_rows_per_second > 0 and moving.processed_rows_per_second > 0
            assert raw.batch_duration_ms is not None and raw.batch_duration_ms > 0
            assert raw.latency_ms is not None and raw.latency_ms >= raw.batch_duration_ms
            # A triggered run: every flow ends; then each dataset is read from its table.
            until("the run's end", lambda: ENDED in log_path.read_text(), 400, proc, log_path)
            ended = client.progress(history=True)
            raw = ended.vertices["flights-raw"]
            assert raw.rows_total == FILES * ROWS_PER_FILE, raw
            assert ended.micro_batches >= FILES
            assert ended.input_rows_per_second == 0  # every flow ended: nothing is read
            h = ended.history
            assert h is not None and h.timestamps
            totals = [t for t in h.vertices["flights-raw"].rows_total if t is not None]
            assert totals == sorted(totals) and totals[-1] == FILES * ROWS_PER_FILE
            for vertex, columns in DATASETS.items():
                result = sample(client, vertex)
                assert result is not None and result.status is SampleStatus.COMPLETE, (
                    vertex,
                    result,
                )
                assert result.materialized_at is not None, (vertex, result)
                records = [r for s in result.samples for r in s.records]
                assert records and result.total_record_count == len(records), (vertex, result)
                for record in records:
                    assert list(json.loads(record.data)) == columns, (vertex, record)
            # The edges, flow -> dataset for the append flow, and the attributes: declared
            # by decorators under @dp.materialized_view, or overridden (a SQL dataset).
            described = {v.name: v for v in client.pipeline().vertices}
            assert described[APPEND_FLOW].inputs == ["flights-raw"]
            assert described["late-arrivals"].inputs == [APPEND_FLOW]
            assert described["delayed-flights"].inputs == ["flights-raw"]
            assert described["origin-counts"].inputs == ["flights-raw"]
            assert described["carrier-delays"].inputs == ["delayed-flights"]
            origin = described["origin-counts"].attributes
            assert origin.no_output_until_end_of_input
            assert origin.idempotent is not None and origin.idempotent.key == ["origin"]
            carrier = described["carrier-delays"].attributes
            assert carrier.no_output_until_end_of_input
            assert carrier.idempotent is not None and carrier.idempotent.key == ["carrier"]
            assert described["flights-raw"].attributes == VertexAttributes()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
