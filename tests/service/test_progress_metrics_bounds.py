"""``/metrics``' per-vertex live metrics keep their labels bounded whatever drivers answer:
only vertices the store knows, at most 64 per application, 2000 (application, vertex) pairs
and 200 applications in all (those read longest ago leave first, counted as dropped), and an
application not read for 15 minutes leaves. ``ProgressSeries`` with a fake clock, and a
service over real HTTP in front of a driver that names vertices of its own. Against a real
Spark driver: test_progress_live.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics
from sparkglass.service.metrics import (
    MAX_PROGRESS_APPLICATIONS,
    MAX_PROGRESS_VERTEX_SERIES,
    MAX_PROGRESS_VERTICES_PER_APPLICATION,
    ProgressSeries,
)

from .fake_driver import FakeDriver, ServerThread


def metrics(vertices: list[str], **extra: Any) -> PipelineMetrics:
    return PipelineMetrics.model_validate(
        {
            "state": "ACTIVE",
            "microBatches": 7,
            "inputRowsPerSecond": 12.5,
            "batchDurationMs": 250,
            "vertices": {
                v: {"rowsTotal": 100 + i, "rowsPerSecond": 2.0, "stateRows": 3}
                for i, v in enumerate(vertices)
            },
            **extra,
        }
    )


def series(registry: CollectorRegistry, name: str) -> list[dict[str, str]]:
    text = generate_latest(registry).decode()
    return [
        dict(re.findall(r'(\w+)="([^"]*)"', labels))
        for labels in re.findall(rf"^{name}\{{([^}}]*)\}} ", text, flags=re.M)
    ]


def collector(**caps: Any) -> tuple[ProgressSeries, Counter, CollectorRegistry, list[float]]:
    registry = CollectorRegistry()
    dropped = Counter("dropped", "dropped", registry=registry)
    now = [0.0]
    progress = ProgressSeries(dropped, clock=lambda: now[0], **caps)
    registry.register(progress)
    return progress, dropped, registry, now


def test_the_defaults_are_the_documented_caps() -> None:
    assert MAX_PROGRESS_VERTICES_PER_APPLICATION == 64
    assert MAX_PROGRESS_VERTEX_SERIES == 2000
    assert MAX_PROGRESS_APPLICATIONS == 200


def test_only_known_vertices_at_most_per_application_and_in_all() -> None:
    progress, _, registry, now = collector(
        max_applications=3, max_vertices_per_app=4, max_vertex_series=6
    )
    known = [f"v{i}" for i in range(10)]
    # A driver naming vertices the store does not know (names that are no DNS-1123 labels
    # the contract refuses before: test_driver_progress_answers.py).
    progress.record("ns", "a", known, metrics([*known[:6], "made-up"]))
    assert {s["vertex"] for s in series(registry, "sparkglass_vertex_rows_total")} == {
        "v0", "v1", "v2", "v3"
    }  # fmt: skip
    assert registry.get_sample_value("dropped_total") == 2  # v4, v5 past the per-application cap
    now[0] = 1
    progress.record("ns", "b", known, metrics(known[:3]))  # 7 pairs > 6: "a" leaves
    apps = {s["application"] for s in series(registry, "sparkglass_vertex_rows_total")}
    assert apps == {"b"} and progress.series_count() == (1, 3)
    assert registry.get_sample_value("dropped_total") == 2 + 4
    for i, app in enumerate(("c", "d", "e")):
        now[0] = 2 + i
        progress.record("ns", app, known, metrics([]))
    # At most 3 applications: the one read longest ago ("b") left.
    pipeline = series(registry, "sparkglass_pipeline_input_rows_per_second")
    assert sorted(s["application"] for s in pipeline) == ["c", "d", "e"]
    assert {tuple(sorted(s)) for s in pipeline} == {("application", "namespace")}
    vertex = series(registry, "sparkglass_vertex_state_rows")
    assert all(set(s) == {"namespace", "application", "vertex"} for s in vertex)
    # Not read for 15 minutes: gone.
    now[0] = 2 + 900.5
    left = series(registry, "sparkglass_pipeline_micro_batches_total")
    assert {s["application"] for s in left} == {"d", "e"}
    progress.forget("ns", "e")
    assert progress.series_count() == (1, 0)


def test_unknown_figures_are_left_out_not_zero() -> None:
    progress, _, registry, _ = collector()
    progress.record("ns", "a", ["v0"], metrics(["v0"]))
    assert series(registry, "sparkglass_vertex_state_rows") == [
        {"application": "a", "namespace": "ns", "vertex": "v0"}
    ]
    assert series(registry, "sparkglass_vertex_event_time_watermark_timestamp_seconds") == []
    assert series(registry, "sparkglass_pipeline_latency_seconds") == []
    text = generate_latest(registry).decode()
    assert 'sparkglass_pipeline_batch_duration_seconds{application="a",namespace="ns"} 0.25' in text


class NamingDriver(FakeDriver):
    """A driver (the application's own code) naming many vertices the pipeline has not."""

    def progress(self) -> dict[str, Any]:
        body = super().progress()
        body["vertices"].update({f"made-up-{i}": {"rowsTotal": i} for i in range(500)})
        return body


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Any]:
    from sparkglass.service.local import start_local_service

    from .fake_driver import TOKEN

    driver = NamingDriver()
    with ServerThread(driver.app()) as server:
        driver.url = server.url
        svc = start_local_service(
            {"flights": (server.url, TOKEN)},
            database_url=f"sqlite:///{tmp_path / 'bounds.db'}",
            refresh_interval_seconds=60,
        )
        try:
            yield svc
        finally:
            svc.stop()


def test_a_driver_cannot_add_labels_over_http(service: Any) -> None:
    headers = {"Authorization": f"Bearer {service.token}"}
    url = f"{service.url}/api/v1/namespaces/local/applications/flights/progress"
    assert httpx.get(url, headers=headers, timeout=30).status_code == 200
    text = httpx.get(f"{service.url}/metrics", timeout=30).text
    labelled = set(re.findall(r'^sparkglass_vertex_rows_total\{[^}]*vertex="([^"]+)"', text, re.M))
    assert labelled and not any(v.startswith("made-up") for v in labelled)
    assert "sparkglass_progress_series_dropped_total 0.0" in text
