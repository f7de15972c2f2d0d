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
