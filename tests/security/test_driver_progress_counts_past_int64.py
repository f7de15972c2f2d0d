"""Attack (outside review, item 1): a driver (the application's own code) answers its
progress with a count past int64, say ``{"passedTotal": 10**400}``. Prometheus' text format
cannot write such an int (``generate_latest`` raised ``OverflowError``), so every ``/metrics``
scrape failed for as long as the service kept the snapshot. The contract now bounds every
int of ``PipelineMetrics`` to int64 (as the CRD's ``status.progress`` does): the answer is
refused naming the field, and ``/metrics`` keeps working. Against the real service process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.security.service_process import ServiceProcess, bearer
from tests.service.fake_driver import FakeDriver, ServerThread
from tests.support.scripted_driver import progress_as_given

URL = "/api/v1/namespaces/local/applications/flights/progress"
HUGE = 10**400


class HugeCountDriver(FakeDriver):
    """The fake driver whose progress claims an expectation passed ``10**400`` rows."""

    def progress(self) -> dict[str, Any]:
        body = super().progress()
        body["vertices"]["parse"]["expectations"] = {
            "has-tailnum": {"action": "warn", "passedTotal": HUGE, "failedTotal": 1},
        }
        return body


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    driver = HugeCountDriver()
    driver.override = progress_as_given(driver)
    with ServerThread(driver.app()) as server, ServiceProcess(tmp_path, server.url) as svc:
        yield svc


def test_a_count_past_int64_is_refused_and_metrics_keep_working(
    service: ServiceProcess,
) -> None:
    with httpx.Client(base_url=service.url, timeout=20) as http:
        r = http.get(URL, headers=bearer("viewer"))
        assert r.status_code == 502, r.text
        assert "passedTotal" in r.text or "passed_total" in r.text, r.text
        for _ in range(2):  # every scrape, not only the first
            scrape = http.get("/metrics")
            assert scrape.status_code == 200, scrape.text[:500]
            assert "sparkglass_expectation_rows_total{" not in scrape.text
