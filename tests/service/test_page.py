"""The Data Sample page in headless Chromium against the service and the fake driver:
graph with attributes and blocking edges, status-driven display, subtasks, truncation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkglass.service.local import LocalService, start_local_service

from .browser import artifacts_dir, chromium_page, page_service
from .fake_driver import TOKEN, FakeDriver

pytestmark = pytest.mark.browser


@pytest.fixture
def service(tmp_path: Path, fake_driver: FakeDriver) -> Iterator[LocalService]:
    with page_service(fake_driver.url, TOKEN, tmp_path) as svc:
        yield svc


def test_page_shows_graph_statuses_and_records(service: LocalService) -> None:
    with chromium_page() as page:
        page.goto(service.page_url)
        # The token left the address bar; the application and its graph are shown.
        page.wait_for_selector("[data-testid=vertex-parse]")
        assert "token=" not in page.url
        assert page.get_attribute("[data-testid=edge-carrier-names-enriched]", "data-kind") == (
            "blocking"
        )
        assert page.get_attribute("[data-testid=edge-parse-enriched]", "data-kind") == ("pipelined")
        assert "EOI" in page.text_content("[data-testid=vertex-carrier-names]")
        assert "NCR" in page.text_content("[data-testid=vertex-parse]")

        page.click("[data-testid=vertex-parse]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'COMPLETE'",
            timeout=15000,
        )
        rows = page.locator("[data-testid=record]")
        assert rows.count() == 9
        page.click("[data-testid=view-json]")  # the raw JSON view
        first = page.text_content("[data-testid=record-data]")
        assert '"carrier": "UA"' in first  # pretty-printed JSON
        page.click("[data-testid=view-grid]")
        assert page.locator("[data-testid=truncated-marker]").count() == 1
        assert "struct<carrier:string" in page.text_content("[data-testid=record-type]")
        assert page.is_hidden("[data-testid=stale]")
        page.select_option("[data-testid=subtask-select]", "1")
        assert rows.count() == 3
        page.screenshot(path=str(artifacts_dir() / "data-sample-fake-driver.png"), full_page=True)

        page.click("[data-testid=vertex-partial]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'PARTIAL'",
            timeout=15000,
        )
        assert "Failed subtasks: 2" in page.text_content("[data-testid=status-message]")
        assert "failed" in page.text_content("[data-testid=subtask-select]")

        page.click("[data-testid=vertex-off]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'DISABLED'",
            timeout=15000,
        )
        assert "disabled" in page.text_content("[data-testid=status-message]")

        page.click("[data-testid=vertex-busy]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'FAILED'",
            timeout=15000,
        )
        assert "TOO_MANY_CONCURRENT_ROUNDS" in page.text_content("[data-testid=status-message]")

        page.click("[data-testid=vertex-slow]")
        page.wait_for_selector("[data-testid=status].PENDING", timeout=5000)
        assert "Sampling" in page.text_content("[data-testid=status-message]")

        page.click("[data-testid=vertex-idle]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'NO_DATA'",
            timeout=15000,
        )
        message = page.text_content("[data-testid=status-message]")
        assert "ran no micro-batch during the round" in message
        assert "2023-11-14 22:13:20" in message  # lastMicroBatchTimestamp, shown in UTC


def test_page_stale_badge_and_bad_token(
    tmp_path: Path, fake_driver: FakeDriver, settings_left_to_the_service: FakeDriver
) -> None:
    svc = start_local_service(
        {"flights": (fake_driver.url, TOKEN)},
        database_url=f"sqlite:///{tmp_path / 'stale.db'}",
        refresh_interval_seconds=1.0,
        poll_interval_seconds=0.05,
        round_grace_seconds=0,
    )
    try:
        with chromium_page() as page:
            page.goto(f"{svc.url}/ui/#token=wrong")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=app-message]')"
                ".textContent.includes('401')"
            )
            page.goto(svc.page_url)
            page.reload()  # the fragment changed only: load the page again with the new token
            page.wait_for_selector("[data-testid=vertex-slow]")
            page.click("[data-testid=vertex-slow]")
            # A 2 s round, cached 1 s: the page polls every 3 s and soon shows a stale result.
            page.wait_for_selector("[data-testid=stale]:not([hidden])", timeout=20000)
            assert page.text_content("[data-testid=status]") == "COMPLETE"
    finally:
        svc.stop()


def test_page_revalidates_an_unchanged_result_with_its_etag(service: LocalService) -> None:
    with chromium_page() as page:
        page.goto(service.page_url)
        page.click("[data-testid=vertex-parse]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent === 'COMPLETE'",
            timeout=15000,
        )
        # The next polls send the shown result's ETag and get bodiless 304s.
        with page.expect_response(
            lambda r: "/vertices/parse/data-sample" in r.url and r.status == 304, timeout=15000
        ) as answer:
            pass
        assert answer.value.request.headers["if-none-match"].startswith('W/"')
        # The records stay on screen after the 304s.
        assert page.locator("[data-testid=record]").count() == 9
        assert page.text_content("[data-testid=status]") == "COMPLETE"
