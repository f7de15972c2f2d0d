"""``GET /api/v1/namespaces/{ns}/applications/{app}/progress``: the pipeline's live metrics
read from the (fake) driver over HTTP, authorized like the other application routes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import kmock
import pytest
from fastapi.testclient import TestClient

from sparkglass.runtime.contract.description import PipelineDescription
from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics, QueryState
from sparkglass.service.app import create_app
from sparkglass.service.catalog import register_local_application
from sparkglass.service.pipeline_progress import CACHE_TTL_S
from sparkglass.service.settings import Settings
from tests.support.scripted_driver import progress_as_given

from .conftest import ServiceFactory, auth
from .fake_driver import PIPELINE, TOKEN, FakeDriver
from .kube_fixtures import ReviewingEmulator, install

URL = "/api/v1/namespaces/local/applications/{app}/progress"


def test_progress_of_the_whole_pipeline_in_one_answer(
    make_service: ServiceFactory, fake_driver: FakeDriver
) -> None:
    client = make_service()
    first_at = time.monotonic()
    r = client.get(URL.format(app="flights"), headers=auth("viewer"))
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    metrics = PipelineMetrics.model_validate(body)
    assert metrics.state is QueryState.ACTIVE and metrics.micro_batches >= 1
    steps = {v.name for v in PIPELINE.vertices if v.kind.value != "sink"}
    assert set(metrics.vertices) == steps  # every vertex, one request
    n = metrics.micro_batches
    assert metrics.vertices["flights"].rows_last_micro_batch == 10 + n
    assert body["vertices"]["parse"]["rowsPerSecond"] == 20.0 + n  # camelCase on the wire

    # Within a second every caller gets the same snapshot (the driver is asked once)...
    reads = fake_driver.progress_reads
    again = client.get(URL.format(app="flights"), headers=auth("sampler")).json()
    if time.monotonic() - first_at < CACHE_TTL_S:  # (a very busy machine may be slower)
        assert again["microBatches"] == n and fake_driver.progress_reads == reads
    # ...and then a newer one.
    deadline = time.monotonic() + 10 * CACHE_TTL_S
    while (later := client.get(URL.format(app="flights"), headers=auth("viewer")).json())[
        "microBatches"
    ] == n:
        assert time.monotonic() < deadline, "the metrics never moved on"
        time.sleep(0.1)
    assert later["microBatches"] > n


def test_errors_name_what_is_wrong(make_service: ServiceFactory) -> None:
    client = make_service()
    assert client.get(URL.format(app="flights")).status_code == 401
    bad = client.get(URL.format(app="flights"), headers={"Authorization": "Bearer x"})
    assert bad.status_code == 401
    missing = client.get(URL.format(app="nope"), headers=auth("viewer"))
    assert missing.status_code == 404 and "applications: flights" in missing.json()["detail"]
    # A registered driver that went away: 502 with the reason, never the driver token.
    register_local_application(
        client.app.state.sparkglass.sessions,  # type: ignore[attr-defined]
        "gone",
        "http://127.0.0.1:9",
        "gone-driver-secret",
        description=PipelineDescription.model_validate(
            {"name": "gone", "vertices": [{"name": "src", "kind": "source"}]}
        ),
    )
    gone = client.get(URL.format(app="gone"), headers=auth("viewer"))
    assert gone.status_code == 502, gone.text
    assert "local/gone" in gone.json()["detail"] and "unreachable" in gone.json()["detail"]
    assert "gone-driver-secret" not in gone.text


@pytest.mark.kmock(cls=ReviewingEmulator)
async def test_authorized_like_the_other_application_routes(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, fake_driver: FakeDriver
) -> None:
    install(kmock)
    settings: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'store.db'}",
        "auth_mode": "kubernetes",
        "kube_api_url": str(kmock.url),
        "kube_token": "service-account-token",
    }
    app = create_app(Settings(**settings))
    register_local_application(app.state.sparkglass.sessions, "flights", fake_driver.url, TOKEN)
    with TestClient(app) as client:

        def get(token: str, name: str = "flights") -> Any:
            return client.get(URL.format(app=name), headers={"Authorization": f"Bearer {token}"})

        # The emulator runs on this test's event loop: call the service from another thread.
        denied = await asyncio.to_thread(get, "eve-token")
        assert (denied.status_code, denied.json()) == (403, {"detail": "forbidden"})
        hidden = await asyncio.to_thread(get, "eve-token", "no-such-app")
        assert hidden.status_code == 403  # no 404: a denied caller learns no names
        reader = await asyncio.to_thread(get, "bob-token")
        assert reader.status_code == 200 and reader.json()["state"] == "ACTIVE"


def _with_expectations(fake_driver: FakeDriver) -> Any:
    """The fake driver's progress with expectation counts on ``parse`` (and on a vertex the
    application does not have, and under a name that is no DNS-1123 label: both must stay
    out of /metrics)."""
    plain = fake_driver.progress

    def progress() -> dict[str, Any]:
        body = plain()
        n = body["microBatches"]
        body["vertices"]["parse"]["expectations"] = {
            "has-tailnum": {
                "action": "warn",
                "passedLastMicroBatch": 8,
                "failedLastMicroBatch": 2,
                "passedTotal": 8 * n,
                "failedTotal": 2 * n,
            },
            "not-early": {"action": "drop", "failedLastMicroBatch": 1, "failedTotal": n},
        }
        body["vertices"]["intruder"] = {"expectations": {"x": {"action": "warn", "failedTotal": 1}}}
        return body

    return progress


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """``{sorted labels: value}`` of one metric family in a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_expectation_counts_in_progress_and_metrics(
    make_service: ServiceFactory, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake_driver, "progress", _with_expectations(fake_driver))
    client = make_service()
    before = client.get("/metrics").text
    assert "sparkglass_expectation_rows_total{" not in before  # nothing read yet
    body = client.get(URL.format(app="flights"), headers=auth("viewer")).json()
    n = body["microBatches"]
    parse = body["vertices"]["parse"]["expectations"]
    assert list(parse) == ["has-tailnum", "not-early"]  # declaration order
    assert parse["has-tailnum"] == {
        "action": "warn",
        "passedLastMicroBatch": 8,
        "failedLastMicroBatch": 2,
        "passedTotal": 8 * n,
        "failedTotal": 2 * n,
    }
    assert body["vertices"]["flights"]["expectations"] == {}

    text = client.get("/metrics").text
    totals = _samples(text, "sparkglass_expectation_rows_total")
    base = {"namespace": "local", "application": "flights", "vertex": "parse"}

    def key(expectation: str, action: str, outcome: str) -> tuple[tuple[str, str], ...]:
        labels = {**base, "expectation": expectation, "action": action, "outcome": outcome}
        return tuple(sorted(labels.items()))

    assert totals == {
        key("has-tailnum", "warn", "passed"): 8 * n,
        key("has-tailnum", "warn", "failed"): 2 * n,
        key("not-early", "drop", "passed"): 0,
        key("not-early", "drop", "failed"): n,
    }  # the driver's unknown vertex is not exported
    last = _samples(text, "sparkglass_expectation_rows_last_micro_batch")
    assert last[key("has-tailnum", "warn", "failed")] == 2
    observed = _samples(text, "sparkglass_expectation_observed_timestamp_seconds")
    assert observed[(("application", "flights"), ("namespace", "local"))] == pytest.approx(
        body["observedAt"] / 1000
    )
    # Deleting the application removes its series.
    assert (
        client.delete(
            "/api/v1/namespaces/local/applications/flights", headers=auth("admin")
        ).status_code
        == 204
    )
    assert "sparkglass_expectation_rows_total{" not in client.get("/metrics").text


def test_progress_rejects_an_expectation_name_that_is_no_label(
    make_service: ServiceFactory, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = fake_driver.progress

    def progress() -> dict[str, Any]:
        body = plain()
        body["vertices"]["parse"]["expectations"] = {'x"} 1\nfake_metric{a="': {"action": "warn"}}
        return body

    monkeypatch.setattr(fake_driver, "progress", progress)
    monkeypatch.setattr(fake_driver, "override", progress_as_given(fake_driver))
    client = make_service()
    bad = client.get(URL.format(app="flights"), headers=auth("viewer"))
    assert bad.status_code == 502, bad.text  # the contract refuses it; nothing is exported
    assert "fake_metric" not in client.get("/metrics").text


def test_expectation_series_are_bounded() -> None:
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from sparkglass.runtime.contract.pipeline_metrics import PipelineMetrics
    from sparkglass.service.metrics import ExpectationSeries

    registry = CollectorRegistry()
    dropped = Counter("dropped", "test", registry=registry)
    now = [0.0]
    series = ExpectationSeries(dropped, max_series=5, ttl_s=60, clock=lambda: now[0])
    registry.register(series)

    def metrics(vertices: int, per_vertex: int) -> PipelineMetrics:
        return PipelineMetrics.model_validate(
            {
                "vertices": {
                    f"v{i}": {
                        "expectations": {
                            f"e{j}": {"action": "warn", "failedTotal": j} for j in range(per_vertex)
                        }
                    }
                    for i in range(vertices)
                }
            }
        )

    names = {f"v{i}" for i in range(10)}
    series.record("ns", "a", names, metrics(1, 3))
    series.record("ns", "b", names, metrics(1, 2))
    assert series.series_count() == 5 and dropped._value.get() == 0
    # A third application pushes the one read longest ago out.
    now[0] = 1
    series.record("ns", "c", names, metrics(1, 2))
    assert series.series_count() == 4 and dropped._value.get() == 3
    text = generate_latest(registry).decode()
    assert 'application="a"' not in text and 'application="c"' in text
    # One application alone over the cap keeps the first series by name.
    series.record("ns", "d", names, metrics(4, 3))
    assert series.series_count() == 5
    # Vertices the application does not have are ignored.
    series.record("ns", "e", {"v0"}, metrics(3, 1))
    assert 'vertex="v1",' not in generate_latest(registry).decode().split('application="e"')[-1]
    # An application not read for the TTL leaves.
    now[0] = 1000
    assert "sparkglass_expectation_rows_total{" not in generate_latest(registry).decode()
    assert series.series_count() == 0
