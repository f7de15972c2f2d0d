"""Attack surface: no security headers (the page could be framed, data
sniffed as HTML, sample data cached by proxies and browsers) and ``/docs`` loading its
scripts from a CDN. Against the real service process over HTTP, and the page in headless
Chromium under the CSP (no violation may be reported)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.security.service_process import ServiceProcess, bearer
from tests.service.browser import chromium_page
from tests.service.fake_driver import FakeDriver, ServerThread

SAMPLE = "/api/v1/namespaces/local/applications/flights/vertices/parse/data-sample"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    driver = FakeDriver(pending_seconds=0.1)
    with (
        ServerThread(driver.app()) as server,
        ServiceProcess(tmp_path, server.url, SPARKGLASS_POLL_INTERVAL_SECONDS="0.05") as svc,
    ):
        yield svc


def assert_common(r: httpx.Response) -> None:
    h = r.headers
    assert h.get("x-frame-options") == "DENY", (r.url, dict(h))
    assert h.get("x-content-type-options") == "nosniff", r.url
    assert h.get("referrer-policy") == "no-referrer", r.url
    csp = h.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, (r.url, csp)
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, (r.url, csp)


def poll_sample(http: httpx.Client) -> httpx.Response:
    for _ in range(200):
        r = http.get(SAMPLE, headers=bearer("sampler"))
        if r.status_code == 200 and r.json()["status"] != "PENDING":
            return r
        http.get("/healthz")  # a request in between, not a sleep: the round runs meanwhile
    raise AssertionError("no result")


def test_every_response_carries_the_headers(service: ServiceProcess) -> None:
    with httpx.Client(base_url=service.url, timeout=20) as http:
        answers = [
            http.get("/healthz"),
            http.get("/metrics"),
            http.get("/ui/"),
            http.get("/ui/app.js"),
            http.get("/ui/style.css"),
            http.get("/api/v1/applications"),  # 401
            http.get("/api/v1/namespaces/local/applications", headers=bearer("viewer")),
            http.get("/no/such/page"),  # 404
            http.put(
                "/api/v1/namespaces/local/applications/x",
                content=b"x" * (2 * 1024 * 1024),
                headers=bearer("admin"),
            ),  # 413
        ]
        sample = poll_sample(http)
        round_id = sample.json()["roundId"]
        answers += [
            sample,
            http.get(
                f"/api/v1/namespaces/local/applications/flights/rounds/{round_id}",
                headers=bearer("viewer"),
            ),
            http.get(
                "/api/v1/namespaces/local/applications/flights/vertices/parse/rounds",
                headers=bearer("viewer"),
            ),
        ]
        for r in answers:
            assert_common(r)
        # Sampled records are never stored by a browser or proxy.
        for r in answers[5:]:
            if r.url.path.startswith("/api/"):
                assert r.headers.get("cache-control") == "no-store", r.url
        assert answers[-3].json()["status"] == "COMPLETE"
        # No Swagger UI by default (it would load scripts from a CDN); the schema stays.
        docs = http.get("/docs")
        assert docs.status_code == 404 and "SPARKGLASS_DOCS_ENABLED" in docs.json()["detail"]
        assert http.get("/redoc").status_code == 404
        assert http.get("/openapi.json").status_code == 200


def test_page_works_under_the_csp(service: ServiceProcess) -> None:
    violations: list[str] = []
    console_errors: list[str] = []
    with chromium_page() as page:

        def on_console(msg: Any) -> None:
            if msg.type == "error":
                console_errors.append(msg.text)

        page.on("console", on_console)
        # The browser's own report of each violation, collected in the page.
        page.add_init_script(
            "window.__cspViolations = [];"
            "document.addEventListener('securitypolicyviolation', e =>"
            " window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        response = page.goto(f"{service.url}/ui/#token={bearer('sampler')['Authorization'][7:]}")
        assert response is not None
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_selector("[data-testid=vertex-parse]")
        page.click("[data-testid=vertex-parse]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'COMPLETE'",
            timeout=20000,
        )
        assert page.locator("[data-testid=record]").count() == 9
        # The grid, its sort, search, raw JSON, a download (a blob: URL) and the live
        # metrics all work under the CSP.
        page.click("[data-testid=col-flight]")
        page.fill("[data-testid=search]", "1001")
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=record]').length === 1"
        )
        page.click("[data-testid=raw-toggle]")
        page.wait_for_selector("[data-testid=record-detail]")
        with page.expect_download() as info:
            page.click("[data-testid=export-jsonl]")
        assert info.value.path() is not None
        page.wait_for_selector("[data-testid=vertex-metrics-parse]:not(:empty)", timeout=15000)
        assert page.text_content("[data-testid=query-state]") == "ACTIVE"
        # The graph got its width through the CSSOM (allowed), and its stylesheet applied.
        assert (
            page.evaluate("() => getComputedStyle(document.querySelector('header')).display") != ""
        )
        violations = page.evaluate("() => window.__cspViolations")
        page_errors = list(console_errors)
    assert violations == [], violations
    assert not [e for e in page_errors if "Content Security Policy" in e], page_errors
    # (Framing is refused by X-Frame-Options and frame-ancestors, asserted on every answer
    # above.)
