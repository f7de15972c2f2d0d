"""Attack: grow ``/metrics`` without bound by sending made-up HTTP
methods (each became a label value, hence new series) and made-up paths, against the real
service process over HTTP."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.security.service_process import ServiceProcess, bearer
from tests.service.fake_driver import FakeDriver, ServerThread

_SERIES = re.compile(r"^(sparkglass_http_[a-z_]+)\{([^}]*)\}", re.M)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    driver = FakeDriver()
    with ServerThread(driver.app()) as server, ServiceProcess(tmp_path, server.url) as svc:
        yield svc


def http_series(url: str) -> set[str]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {f"{m.group(1)}{{{m.group(2)}}}" for m in _SERIES.finditer(text)}


def test_made_up_methods_and_paths_add_no_series(service: ServiceProcess) -> None:
    url = service.url
    with httpx.Client(base_url=url, timeout=10) as http:
        # Warm up the label combinations an attacker's requests can legitimately fall in:
        # one request of each kind before counting.
        http.request("PURGE", "/api/v1/applications")
        http.request("PURGE", "/no/such/path")
        http.get("/no/such/path")
        http.get("/api/v1/applications")
        http.get("/api/v1/applications", headers=bearer("viewer"))
        http_series(url)  # the scrape itself is a request with its own series
        before = http_series(url)
        for i in range(200):
            method = f"X{secrets.token_hex(4).upper()}{i}"
            path = "/api/v1/applications" if i % 2 else f"/no/such/{secrets.token_hex(6)}"
            r = http.request(method, path)
            assert r.status_code in (404, 405), (method, path, r.status_code)
        after = http_series(url)
    new = sorted(after - before)
    assert new == [], f"{len(new)} new series, e.g. {new[:5]}"
    assert 'method="OTHER"' in "".join(after)
    # Routes are templates, never raw paths.
    assert not any("/no/such/" in s for s in after)
