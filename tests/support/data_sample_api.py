"""The service's data-sample REST API as the page uses it: the URL of a vertex's sample and
polling it until the answer is final."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient

from tests.service.conftest import auth

BASE = "/api/v1/namespaces/local/applications/flights"


def sample_url(vertex: str) -> str:
    return f"{BASE}/vertices/{vertex}/data-sample"


def poll_until_done(
    client: TestClient, vertex: str, role: str = "sampler", timeout: float = 60.0, **params: Any
) -> dict[str, Any]:
    """Poll like the page does until the answer is no longer PENDING or stale."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(sample_url(vertex), headers=auth(role), params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        if body["status"] != "PENDING" and not body["stale"]:
            return body
        assert time.monotonic() < deadline, f"still {body['status']} after {timeout}s"
        time.sleep(0.05)
