"""Attack surface of the Data Sample page: sampled records are attacker-controlled text (any
row of the pipeline's input). Markup in them must stay text in every view of the records
grid (cells, nested values expanded, the raw JSON of a record, the JSON view), no script may
run, and the CSV export must not hand a spreadsheet a formula. Against the real service
process (with its CSP) and the fake driver, in headless Chromium."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.security.service_process import ServiceProcess, bearer
from tests.service.browser import chromium_page
from tests.service.fake_driver import NESTED_RECORDS, FakeDriver, ServerThread

pytestmark = pytest.mark.browser

#: Markup a record of the ``nested`` vertex carries (see the fake driver).
MARKUP = ['<img src=x onerror="window.__xss=1">', "<script>window.__xss=2</script>", "<b>LAX</b>"]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    driver = FakeDriver(pending_seconds=0.1)
    with (
        ServerThread(driver.app()) as server,
        ServiceProcess(tmp_path, server.url, SPARKGLASS_POLL_INTERVAL_SECONDS="0.05") as svc,
    ):
        yield svc


def test_markup_in_records_stays_text_everywhere(service: ServiceProcess) -> None:
    token = bearer("sampler")["Authorization"][7:]
    dialogs: list[str] = []
    with chromium_page() as page:

        def on_dialog(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.add_init_script(
            "window.__cspViolations = [];"
            "document.addEventListener('securitypolicyviolation', e =>"
            " window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));"
        )
        page.goto(f"{service.url}/ui/#token={token}")
        page.wait_for_selector("[data-testid=vertex-nested]")
        page.click("[data-testid=vertex-nested]")
        page.wait_for_selector("[data-testid=record]", timeout=20000)
        grid = page.locator("[data-testid=records]")

        def no_markup_ran() -> None:
            assert grid.locator("img, script, b, a, iframe").count() == 0
            assert page.evaluate("() => window.__xss") is None
            text = grid.text_content() or ""
            for m in MARKUP:
                assert m.replace('"', '\\"') in text or m in text, (m, text[:500])

        no_markup_ran()
        for summary in page.locator("[data-testid=records] summary").all():
            summary.click()  # every nested value expanded
        no_markup_ran()
        for toggle in page.locator("[data-testid=raw-toggle]").all():
            toggle.click()  # every record's raw JSON
        no_markup_ran()
        page.click("[data-testid=view-json]")
        no_markup_ran()
        # The search runs over the records' text, not over markup made into elements.
        page.fill("[data-testid=search]", "<script>")
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=record]').length === 1"
        )
        no_markup_ran()

        page.fill("[data-testid=search]", "")
        page.click("[data-testid=view-grid]")
        # The export takes the shown records: wait until the cleared search shows them all.
        page.wait_for_function(
            f"() => document.querySelectorAll('[data-testid=record]').length === "
            f"{len(NESTED_RECORDS)}"
        )
        with page.expect_download() as info:
            page.click("[data-testid=export-csv]")
        path = info.value.path()
        assert path is not None
        rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
        violations = page.evaluate("() => window.__cspViolations")
    assert dialogs == [] and violations == [], (dialogs, violations)
    # A cell starting with = + - @ would be a formula in a spreadsheet: it is quoted with '.
    # Rows are matched by content, not position: the export follows the grid's order.
    by_carrier = {r["carrier"]: r for r in rows}
    assert NESTED_RECORDS[0]["carrier"] in by_carrier, rows
    ua = by_carrier[NESTED_RECORDS[0]["carrier"]]
    assert ua["formula"] == "'" + NESTED_RECORDS[0]["formula"], rows
    markup = by_carrier[NESTED_RECORDS[1]["carrier"]]
    assert json.loads(markup["tags"]) == NESTED_RECORDS[1]["tags"]
