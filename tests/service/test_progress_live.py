"""The service in front of a real local Spark driver running a small DSL pipeline (rows, a
watermark and a windowed count): ``/metrics`` exports each vertex's live metrics with bounded
labels, and the Data Sample page draws their last minutes as sparklines (headless Chromium).
Everything over real HTTP on 127.0.0.1."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkglass.service.local import LocalService, start_local_service
from tests.support.spark_conf import spark_conf

from .browser import artifacts_dir, chromium_page

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CONFS = {
    "spark.sparkglass.sampling.enabled": "true",
    # A point per second: the page has several after a few seconds.
    "spark.sparkglass.progress.historyMinutes": "1",
    "spark.sparkglass.progress.historyPoints": "60",
}
APP = "live"
PROGRESS = f"/api/v1/namespaces/local/applications/{APP}/progress"


@pytest.fixture(scope="module")
def live(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:

    workdir = tmp_path_factory.mktemp("progress-live")
    with spark_conf(spark, CONFS):
        yield from _served_pipeline(spark, workdir)


def _served_pipeline(spark: Any, workdir: Path) -> Iterator[LocalService]:
    from pyspark.sql import functions as F

    from sparkglass.runtime.pipeline import Pipeline
    from sparkglass.runtime.sampling import registry

    p = Pipeline(APP, spark)
    p.source("events", spark.readStream.format("rate").option("rowsPerSecond", 50).load())
    p.vertex("parse", "events", lambda df: df.where("value % 5 <> 0"))
    p.vertex(
        "per-second",
        "parse",
        lambda df: (
            df.withWatermark("timestamp", "1 second")
            .groupBy(F.window("timestamp", "1 second"))
            .count()
        ),
    )
    p.sink(
        "out",
        "per-second",
        lambda df: (
            df.writeStream.format("noop")
            .outputMode("append")
            .trigger(processingTime="300 milliseconds")
        ),
    )
    p.start()
    service = None
    try:
        deadline = time.monotonic() + 90
        while (m := p.metrics(history=True)).history is None or len(m.history.timestamps) < 4:
            assert time.monotonic() < deadline, "no history points"
            time.sleep(0.3)
        endpoint = registry.endpoint_for(spark)
        assert endpoint is not None, "sampling on but no control endpoint"
        service = start_local_service(
            {APP: (endpoint.url, endpoint.token)},
            database_url=f"sqlite:///{workdir / 'service.db'}",
            refresh_interval_seconds=30,
            poll_interval_seconds=0.2,
        )
        yield service
    finally:
        if service is not None:
            service.stop()
        p.stop()


def _get(service: LocalService, path: str, **params: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {service.token}"}
    return httpx.get(f"{service.url}{path}", headers=headers, params=params, timeout=30)


def _samples(text: str, name: str) -> dict[str, float]:
    """``{vertex or application: value}`` of metric ``name`` in Prometheus text (the series of
    application ``live``)."""
    out: dict[str, float] = {}
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, flags=re.M):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        assert found.pop("namespace") == "local", labels
        assert found.pop("application") == APP, labels
        assert set(found) <= {"vertex"}, labels  # nothing else is labelled
        out[found.get("vertex", APP)] = float(value)
    return out


def test_progress_and_history_through_the_service(live: LocalService) -> None:
    plain = _get(live, PROGRESS)
    assert plain.status_code == 200, plain.text
    assert plain.json()["history"] is None
    body = _get(live, PROGRESS, history="true").json()
    h = body["history"]
    assert h["windowSeconds"] == 60 and h["maxPoints"] == 60 and h["resolutionSeconds"] == 1
    assert 4 <= len(h["timestamps"]) <= 60
    assert len(h["vertices"]["parse"]["rowsPerSecond"]) == len(h["timestamps"])
    assert body["vertices"]["per-second"]["stateRows"] is not None


def test_metrics_export_each_vertex_with_bounded_labels(live: LocalService) -> None:
    # /metrics exports the latest reading: one whose last micro-batch had rows (a stateful
    # query also runs micro-batches without input, to move its watermark: 0 rows/s then).
    deadline = time.monotonic() + 60
    while True:
        body = _get(live, PROGRESS).json()
        text = httpx.get(f"{live.url}/metrics", timeout=30).text
        if body["vertices"]["parse"]["rowsLastMicroBatch"] > 0:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.5)
    rows = _samples(text, "sparkglass_vertex_rows_total")
    # One series per vertex the store knows (sinks have no rows of their own), no others.
    assert set(rows) == {"events", "parse", "per-second"}
    assert rows["parse"] > 0
    assert _samples(text, "sparkglass_vertex_rows_per_second")["parse"] > 0
    windowed = "per-second"
    assert _samples(text, "sparkglass_vertex_batch_duration_seconds")[windowed] > 0
    assert _samples(text, "sparkglass_vertex_latency_seconds")[windowed] > 0
    assert _samples(text, "sparkglass_vertex_state_rows")[windowed] >= 1
    watermark = _samples(text, "sparkglass_vertex_event_time_watermark_timestamp_seconds")
    assert time.time() - 120 < watermark[windowed] <= time.time()
    assert _samples(text, "sparkglass_pipeline_input_rows_per_second")[APP] > 0
    assert _samples(text, "sparkglass_pipeline_micro_batches_total")[APP] >= 4
    assert "sparkglass_progress_series_dropped_total 0.0" in text


def test_the_page_draws_the_last_minutes(live: LocalService, tmp_path: Path) -> None:
    with chromium_page() as page:
        page.goto(f"{live.url}/ui/#token={live.token}")
        page.wait_for_selector("[data-testid=vertex-parse]")

        def points(testid: str) -> int:
            return int(
                page.get_attribute(f"[data-testid={testid}]", "data-points", timeout=20000) or 0
            )

        page.wait_for_function(
            "() => Number((document.querySelector('[data-testid=spark-input-rate]') || "
            "{getAttribute: () => 0}).getAttribute('data-points')) >= 2",
            timeout=30000,
        )
        first = points("spark-input-rate")
        assert first >= 2
        # Refreshes between two of the history's (every 30 s) add their reading to it.
        page.wait_for_function(
            "(n) => Number(document.querySelector('[data-testid=spark-input-rate]')"
            ".getAttribute('data-points')) > n",
            arg=first,
            timeout=20000,
        )
        assert points("spark-processed-rate") >= 2
        assert points("spark-batch-duration") >= 2 and points("spark-latency") >= 2
        assert points("spark-state-rows") >= 2
        assert page.text_content("[data-testid=batch-duration]") not in ("", "–")
        assert page.text_content("[data-testid=watermark]") not in ("", "–")
        # Each vertex with rows has its rows/s line in its graph node.
        assert points("vertex-spark-parse") >= 2
        path = page.get_attribute("[data-testid=vertex-spark-parse] path", "d") or ""
        assert path.startswith("M") and path.count("L") >= 1
        # The selected vertex's figures, each with its series.
        page.click("[data-testid=vertex-per-second]")
        page.wait_for_selector("[data-testid=vertex-metrics]:not([hidden])")
        assert points("vertex-spark-detail-rowsTotal") >= 2
        assert points("vertex-spark-detail-stateRows") >= 2
        assert page.text_content("[data-testid=vertex-metric-stateRows]") not in ("", "–")
        page.screenshot(path=str(artifacts_dir() / "progress-sparklines.png"))
