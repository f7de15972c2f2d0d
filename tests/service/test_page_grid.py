"""The Data Sample page's records grid, export and live graph metrics in headless Chromium,
against the real service and the fake driver over HTTP: columns per field, sorting, search,
raw JSON, copy, JSON Lines and CSV downloads, markup rendered as text, 5,000 records, and
the metrics on the graph refreshing. (The picture in ``docs/`` is taken by
``test_real_driver.py`` against the flights demo.)"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from sparkglass.service.local import LocalService

from .browser import (
    artifacts_dir,
    chromium_page,
    column,
    downloaded,
    headers,
    open_vertex,
    page_service,
)
from .fake_driver import NESTED_RECORDS, TOKEN, FakeDriver

pytestmark = pytest.mark.browser


@pytest.fixture
def service(tmp_path: Path, fake_driver: FakeDriver) -> Iterator[LocalService]:
    with page_service(fake_driver.url, TOKEN, tmp_path) as svc:
        yield svc


def test_grid_sort_search_raw_json_copy_and_export(service: LocalService) -> None:
    with chromium_page() as page:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=service.url)
        page.goto(service.page_url)
        open_vertex(page, "parse")
        # One column per top-level field of the vertex's type, in the type's order.
        assert headers(page) == ["@time", "@subtask", "carrier", "flight", "dep_delay", ""]
        assert page.locator("[data-testid=record]").count() == 9
        assert page.text_content("[data-testid=match-count]") == "9 records"
        assert "struct<carrier:string" in page.text_content("[data-testid=record-type]")
        assert set(column(page, "carrier")) == {"UA"}
        # The truncated record is marked in its row.
        marked = page.locator("tr:has([data-testid=truncated-marker])")
        assert marked.count() == 1 and "#1" in marked.text_content()

        # Sorting: numbers numerically, both directions, the arrow on the sorted column.
        page.click("[data-testid=col-flight]")
        flights = [int(x) for x in column(page, "flight")]
        assert flights == sorted(flights) and flights[0] == 0 and flights[-1] == 2002
        assert "▲" in page.text_content("[data-testid=col-flight]")
        page.click("[data-testid=col-flight]")
        assert [int(x) for x in column(page, "flight")] == sorted(flights, reverse=True)
        assert "▼" in page.text_content("[data-testid=col-flight]")
        page.focus("[data-testid=col-dep_delay]")
        page.keyboard.press("Enter")  # sortable from the keyboard
        delays = [int(x) for x in column(page, "dep_delay")]
        assert delays == sorted(delays)

        # Search over the loaded records.
        page.fill("[data-testid=search]", "1001")
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=record]').length === 1"
        )
        assert column(page, "flight") == ["1001"]
        assert page.text_content("[data-testid=match-count]") == "1 of 9 records"

        # Export the shown sample: the search applies.
        name, text = downloaded(page, "export-jsonl")
        assert name.endswith(".jsonl") and name.startswith("local-flights-parse-")
        assert [json.loads(line) for line in text.splitlines()] == [
            {"carrier": "UA", "flight": 1001, "dep_delay": 1}
        ]
        page.fill("[data-testid=search]", "")
        page.wait_for_function(
            "() => document.querySelectorAll('[data-testid=record]').length === 9"
        )
        name, text = downloaded(page, "export-jsonl")
        lines = text.splitlines()
        assert len(lines) == 9
        assert [json.loads(x)["dep_delay"] for x in lines] == delays  # the shown order
        name, text = downloaded(page, "export-csv")
        assert name.endswith(".csv")
        rows = list(csv.DictReader(io.StringIO(text)))
        assert len(rows) == 9
        assert list(rows[0]) == [
            "sampleTime",
            "subtask",
            "truncated",
            "carrier",
            "flight",
            "dep_delay",
        ]
        assert [int(r["dep_delay"]) for r in rows] == delays
        assert sum(r["truncated"] == "true" for r in rows) == 1
        assert rows[0]["sampleTime"].endswith("Z")

        # The raw JSON of one record is one click away; the whole page in the JSON view.
        first = page.locator("[data-testid=record]").first
        first.locator("[data-testid=raw-toggle]").click()
        detail = page.text_content("[data-testid=record-detail] [data-testid=record-data]")
        assert '"carrier": "UA"' in detail  # pretty-printed
        page.click("[data-testid=view-json]")
        assert page.locator("pre[data-testid=record-data]").count() == 9
        assert "flight" not in headers(page)
        page.click("[data-testid=view-grid]")
        assert "flight" in headers(page)

        # Copy one record.
        wanted = json.loads(detail)
        first.locator("[data-testid=copy-record]").click()
        page.wait_for_function(
            "() => document.querySelector('[data-testid=copy-message]').textContent"
            ".includes('copied')"
        )
        assert json.loads(page.evaluate("() => navigator.clipboard.readText()")) == wanted

        # Subtask filter and sort together.
        page.select_option("[data-testid=subtask-select]", "1")
        assert page.locator("[data-testid=record]").count() == 3
        assert all(1000 <= int(f) < 2000 for f in column(page, "flight"))


def test_nested_values_and_markup_render_as_text(service: LocalService) -> None:
    with chromium_page() as page:
        dialogs: list[str] = []

        def on_dialog(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.goto(service.page_url)
        open_vertex(page, "nested")
        assert headers(page) == [
            "@time",
            "@subtask",
            "carrier",
            "route",
            "tags",
            "delay",
            "note",
            "formula",
            "",
        ]
        # Markup in records is text: no element was created from it, no script ran.
        assert page.evaluate("() => window.__xss") is None
        assert dialogs == []
        grid = page.locator("[data-testid=records]")
        assert grid.locator("img, script, b, a").count() == 0
        carriers = column(page, "carrier")
        assert carriers[1] == NESTED_RECORDS[1]["carrier"]  # '<img src=x onerror=...>'
        assert "<b>LAX</b>" in column(page, "route")[1]
        assert column(page, "note")[0] == "null" and column(page, "tags")[2] == "–"  # missing
        # Nested values are compact on one line and expand on a click.
        route = page.locator("[data-testid=record]").first.locator("details").first
        assert route.locator("summary").text_content() == (
            '{"from":"SFO","to":"JFK","stops":[{"code":"DEN","minutes":45}]}'
        )
        assert not route.locator("pre").is_visible()
        route.locator("summary").click()
        assert '"minutes": 45' in route.locator("pre").text_content()
        # The cut record is marked and shown as its text.
        last = page.locator("[data-testid=record]").nth(3)
        assert page.locator("[data-testid=truncated-marker]").count() == 1
        assert last.locator("[data-testid=truncated-marker]").count() == 1
        assert last.locator("td.raw").text_content() == json.dumps(NESTED_RECORDS[3])[:40]
        # The raw JSON view and the exports keep markup as text too.
        page.click("[data-testid=view-json]")
        assert NESTED_RECORDS[1]["tags"][0] in page.text_content("[data-testid=records]")
        assert grid.locator("script").count() == 0 and page.evaluate("() => window.__xss") is None
        _, text = downloaded(page, "export-jsonl")
        lines = text.splitlines()
        assert [json.loads(x) for x in lines[:3]] == NESTED_RECORDS[:3]
        assert json.loads(lines[3]) == json.dumps(NESTED_RECORDS[3])[:40]  # cut: a string
        _, text = downloaded(page, "export-csv")
        rows = list(csv.DictReader(io.StringIO(text)))
        assert json.loads(rows[0]["route"]) == NESTED_RECORDS[0]["route"]
        # A cell that a spreadsheet would run as a formula is defused.
        assert rows[0]["formula"] == "'" + NESTED_RECORDS[0]["formula"]
        assert rows[3]["raw"] == json.dumps(NESTED_RECORDS[3])[:40] and rows[2]["raw"] == ""
        assert rows[1]["carrier"] == NESTED_RECORDS[1]["carrier"]


def test_five_thousand_records_render_and_sort_under_a_second(service: LocalService) -> None:
    with chromium_page() as page:
        page.goto(service.page_url)
        open_vertex(page, "many")
        assert page.text_content("[data-testid=match-count]") == "5,000 records"
        # Parsing all 5,000 records and laying out the first page, measured by the page.
        render_ms = float(page.get_attribute("[data-testid=records]", "data-render-ms"))
        load_ms = page.evaluate(
            """() => {
                const t = performance.now();
                loadRecords(state.result); renderRecords();
                return performance.now() - t;
            }"""
        )
        assert render_ms < 1000 and load_ms < 1000, (render_ms, load_ms)
        assert page.locator("[data-testid=record]").count() == 100
        assert page.text_content("[data-testid=page-info]") == "1–100 of 5,000"
        # Sorting all 5,000 by a column: the click's handler runs synchronously.
        sort_ms = page.evaluate(
            """() => {
                const t = performance.now();
                document.querySelector('[data-testid=col-delay]').click();
                return performance.now() - t;
            }"""
        )
        assert sort_ms < 1000, sort_ms
        delays = [int(x) for x in column(page, "delay")]
        assert delays == sorted(delays) and delays[0] == 0
        page.click("[data-testid=page-next]")
        assert page.text_content("[data-testid=page-info]") == "101–200 of 5,000"
        assert int(column(page, "delay")[0]) >= delays[-1]
        search_ms = page.evaluate(
            """() => {
                const t = performance.now();
                state.search = '"carrier":"c05"'; state.page = 0; renderRecords();
                return performance.now() - t;
            }"""
        )
        assert search_ms < 1000, search_ms
        assert set(column(page, "carrier")) == {"C05"}
        page.fill("[data-testid=search]", "c05")  # the same through the search box
        page.wait_for_function(
            "() => !document.querySelector('[data-testid=page-info]').textContent"
            ".endsWith('of 5,000')"
        )
        assert set(column(page, "carrier")) == {"C05"}
        page.fill("[data-testid=search]", "")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=page-info]').textContent"
            " === '1–100 of 5,000'"
        )


def test_live_metrics_on_the_graph(service: LocalService, fake_driver: FakeDriver) -> None:
    with chromium_page() as page:
        page.goto(service.page_url)
        page.wait_for_selector("[data-testid=query-state]:not(:empty)", timeout=15000)
        assert page.text_content("[data-testid=query-state]") == "ACTIVE"
        before = int(page.text_content("[data-testid=micro-batches]"))
        text = page.text_content("[data-testid=vertex-metrics-parse]")
        assert text.endswith("/s") and " rows · " in text
        # The next refresh (every 3 s) shows the driver's next micro-batch on every vertex.
        page.wait_for_function(
            f"() => +document.querySelector('[data-testid=micro-batches]').textContent > {before}",
            timeout=15000,
        )
        after = int(page.text_content("[data-testid=micro-batches]"))
        rows = int(page.text_content("[data-testid=vertex-metrics-flights]").split()[0])
        assert rows == 10 + after  # fake driver: micro-batch n has 10 + n rows at `flights`
        assert page.text_content("[data-testid=vertex-metrics-out]") == ""  # sinks: none
        reads = fake_driver.progress_reads
        # One request per refresh for the whole pipeline (all vertices in one answer).
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.wait_for_function(
            f"() => +document.querySelector('[data-testid=micro-batches]').textContent > {after}",
            timeout=15000,
        )
        assert len([u for u in requests if urlsplit(u).path.endswith("/progress")]) == 1
        assert fake_driver.progress_reads > reads

        open_vertex(page, "parse")
        page.click("[data-testid=col-flight]")
        page.screenshot(path=str(artifacts_dir() / "data-sample-grid.png"))
