"""The Data Sample page keeps every digit of a record's numbers: integers beyond
2^53, long decimals and nanosecond timestamps read exactly in the grid, the raw JSON view,
the JSON Lines and the CSV exports, never as the nearest double, with the browser's
reviver source text and without it. And the page's layout at a 1280-px viewport: the
blocking edge's label is whole, the records' row actions are within the grid's width, the
legend's expectation sample is neutral.

Headless Chromium against the real service and the fake driver over HTTP (the fixtures of
``test_page_grid.py``); the fake driver's ``enriched`` vertex answers the records below."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sparkglass.service.local import LocalService
from tests.support.scripted_driver import VertexScript

from .browser import (
    artifacts_dir,
    chromium_page,
    column,
    downloaded,
    open_vertex,
    page_service,
)
from .fake_driver import TOKEN, FakeDriver

pytestmark = pytest.mark.browser

#: The vertex whose rounds answer the records DATA in these tests (it has a blocking input
#: edge, drawn with its label, from ``carrier-names``).
VERTEX = "enriched"
DATA_TYPE = (
    "struct<label:string,n:bigint,amount:decimal(38,18),at:timestamp,nanos:bigint,"
    "nested:struct<n:bigint>,list:array<bigint>>"
)
#: The records' JSON texts, as Spark's ``to_json`` writes them: (label, n, amount, nanos).
VALUES = [
    ("max-safe", "9007199254740991", "0.1", "1709251199123456789"),  # 2^53 - 1
    ("above-safe", "9007199254740993", "12345678901234567890.123456789012345678", "1"),
    ("issue-33", "9007199254743575", "-0.000000000000000001", "9007199254743577"),
    ("long-max", "9223372036854775807", "99999999999999999999.999999999999999999", "0"),
    ("long-min", "-9223372036854775808", "3.141592653589793238", "-1709251199123456789"),
]
DATA = [
    f'{{"label":"{label}","n":{n},"amount":{amount},"at":"2024-02-29T23:59:59.123456Z",'
    f'"nanos":{nanos},"nested":{{"n":{n}}},"list":[{n},1]}}'
    for label, n, amount, nanos in VALUES
]


def exact(text: str) -> Any:
    """A JSON text as Python values that keep every digit (ints exact, decimals Decimal)."""
    return json.loads(text, parse_float=Decimal)


@pytest.fixture
def service(
    tmp_path: Path, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalService]:
    scripted = fake_driver.script

    def script(vertex: str) -> VertexScript:
        if vertex != VERTEX:
            return scripted(vertex)
        now = int(time.time() * 1000)
        records = [
            {"sampleTimestamp": now + i, "data": data, "truncated": False}
            for i, data in enumerate(DATA)
        ]
        return VertexScript(
            partitions=lambda: [{"subtaskIndex": 0, "records": records}], data_type=DATA_TYPE
        )

    # The fake driver (one per session) answers these records for VERTEX in this test only.
    monkeypatch.setattr(fake_driver, "script", script)
    with page_service(fake_driver.url, TOKEN, tmp_path) as svc:
        yield svc


def test_every_digit_in_grid_raw_view_and_exports(service: LocalService) -> None:
    wanted = [exact(d) for d in DATA]
    ns = [n for _, n, _, _ in VALUES]
    with chromium_page() as page:
        page.goto(service.page_url)
        open_vertex(page, VERTEX)
        assert page.locator("[data-testid=record]").count() == len(DATA)

        # The grid: each number as the record wrote it.
        assert column(page, "n") == ns
        assert column(page, "amount") == [a for _, _, a, _ in VALUES]
        assert column(page, "nanos") == [t for _, _, _, t in VALUES]
        assert column(page, "at") == ["2024-02-29T23:59:59.123456Z"] * len(VALUES)
        # Nested values: compact on one line, then the whole value indented (one click away).
        assert column(page, "nested") == [f'{{"n":{n}}}{{\n  "n": {n}\n}}' for n in ns]
        assert column(page, "list") == [f"[{n},1][\n  {n},\n  1\n]" for n in ns]
        # Sorted by the exact values (2^53 - 1 and 2^53 + 1 are one double apart from 2^53).
        page.click("[data-testid=col-n]")
        assert column(page, "n") == sorted(ns, key=int)
        page.click("[data-testid=col-n]")
        assert column(page, "n") == sorted(ns, key=int, reverse=True)
        page.click('[data-testid="col-@time"]')  # back to the time order

        # The raw JSON of one record, and the whole page in the raw JSON view.
        page.locator("[data-testid=record]").nth(1).locator("[data-testid=raw-toggle]").click()
        detail = page.text_content("[data-testid=record-detail] [data-testid=record-data]")
        assert exact(detail) == wanted[1]
        assert "12345678901234567890.123456789012345678" in detail
        page.click("[data-testid=view-json]")
        shown = page.eval_on_selector_all(
            "pre[data-testid=record-data]", "els => els.map((e) => e.textContent)"
        )
        assert [exact(text) for text in shown] == wanted
        page.click("[data-testid=view-grid]")

        # JSON Lines: one record a line, every number exact (and still a JSON number).
        _, text = downloaded(page, "export-jsonl")
        assert [exact(line) for line in text.splitlines()] == wanted
        assert text.splitlines() == DATA  # compact, as sampled

        # CSV: the exact texts in their columns, nested values as compact JSON.
        _, text = downloaded(page, "export-csv")
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [r["n"] for r in rows] == ns
        assert [r["amount"] for r in rows] == [a for _, _, a, _ in VALUES]
        assert [r["nanos"] for r in rows] == [t for _, _, _, t in VALUES]
        assert [exact(r["nested"]) for r in rows] == [w["nested"] for w in wanted]
        assert [exact(r["list"]) for r in rows] == [w["list"] for w in wanted]

        # A browser whose JSON.parse gives its reviver no source text: the page's own
        # lossless parser reads the same values (and the same texts as the native path).
        assert [page.evaluate(SAME_AS_NATIVE, text) for text in TRICKY] == [True] * len(TRICKY)
        native = page.evaluate(READ, TRICKY)
        page.add_init_script(NO_SOURCE_TEXT)
        page.reload()
        assert page.evaluate("() => SOURCE_TEXT") is False
        assert page.evaluate(READ, TRICKY) == native
        open_vertex(page, VERTEX)
        assert column(page, "n") == ns and column(page, "amount") == [a for _, _, a, _ in VALUES]
        _, text = downloaded(page, "export-jsonl")
        assert text.splitlines() == DATA


def test_layout_at_1280_px(service: LocalService) -> None:
    with chromium_page() as page:
        page.set_viewport_size({"width": 1280, "height": 720})
        page.goto(service.page_url)
        open_vertex(page, VERTEX)
        # The blocking edge's label is whole: inside the graph, clear of the nodes, on top of
        # the edges it crosses.
        measured = layout(page)
        assert measured["labels"] == [
            {"text": "blocking", "insideGraph": True, "overNode": False, "onTop": True}
        ]
        # The records' columns are wider than the grid, and each row's actions are within
        # its width and clickable (no cell covers them).
        assert measured["gridScrolls"]
        assert measured["actionsInView"] == [True] * len(DATA)
        assert measured["buttonsOnTop"] == [True] * len(DATA)
        # The legend's sample of a vertex's expectation line is a format, in the legend's
        # neutral style: no count that reads like a live alert.
        assert measured["legend"] == "✗ n failed · m exp." and measured["legendNeutral"]
        page.screenshot(path=str(artifacts_dir() / "data-sample-layout-1280.png"))


#: JSON.parse without the reviver's third argument (as in browsers without source text).
NO_SOURCE_TEXT = """{
  const parse = JSON.parse;
  JSON.parse = function (text, reviver) {
    if (typeof reviver !== "function") return parse(text);
    return parse(text, function (key, value) { return reviver.call(this, key, value); });
  };
}"""
#: The page's lossless parser reads a text as the native reviver does (the same numbers kept
#: exact, the same texts written), and as JSON.parse does but for the kept digits (the same
#: keys in the same order, "__proto__" a field).
SAME_AS_NATIVE = """(text) => {
  const own = parseLossless(text), native = JSON.parse(text, reviveExact);
  const typed = (v) => JSON.stringify(v, (k, x) => x instanceof ExactNumber ? "#" + x.text : x);
  const doubles = (v) => JSON.stringify(v, (k, x) => x instanceof ExactNumber ? +x.text : x);
  return typed(own) === typed(native) && toJson(own, "  ") === toJson(native, "  ")
    && doubles(own) === JSON.stringify(JSON.parse(text));
}"""
#: How the page reads each text: written indented and compact, and which numbers it keeps.
READ = """(texts) => texts.map((text) => {
  const v = parseRecord(text);
  return [toJson(v, "  "), toJson(v),
          JSON.stringify(v, (k, x) => x instanceof ExactNumber ? "#" + x.text : x)];
})"""
TRICKY = [
    *DATA,
    ' { "a" : [ 1 , -0 , 1.5e300 , 12345678901234567 , 1E-18 , true , null , false ] ,\n'
    '   "b\\"c\\\\" : "\\u00e9\\"\\\\", "__proto__": {"x": 9007199254740993}, "": [] , "e": {} }',
    "-9223372036854775808",
    '"a string"',
    "[[],[[]],{}]",
    '{"dup": 1, "dup": 98765432109876543210}',
    "[0.0000001, -0.000001, 1.0E10, 25.0, 0.100000000000000000]",
    "[0.0000001]",
]


def layout(page: Any) -> dict[str, Any]:
    """What the layout checks measure, in page coordinates."""
    return page.evaluate(
        """() => {
            const box = (el) => el.getBoundingClientRect();
            const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5
              && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
            const overlaps = (a, b) => a.left < b.right && b.left < a.right
              && a.top < b.bottom && b.top < a.bottom;
            const onTop = (el) => {
              const r = box(el);
              const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
              return el === hit || el.contains(hit);
            };
            const graph = document.getElementById('graph');
            const labels = [...graph.querySelectorAll('.edge-label')].map((label) => ({
              text: label.textContent,
              insideGraph: inside(box(label), box(graph)),
              overNode: [...graph.querySelectorAll('.node rect')]
                .some((rect) => overlaps(box(label), box(rect))),
              onTop: onTop(label),
            }));
            // The grid's visible area: its box without border and scroll bar.
            const wrap = document.getElementById('grid-wrap'), w = box(wrap);
            const view = { left: w.left + wrap.clientLeft, top: w.top + wrap.clientTop };
            view.right = view.left + wrap.clientWidth;
            view.bottom = view.top + wrap.clientHeight;
            const actions = [...document.querySelectorAll('#records tbody td.actions')];
            const legend = document.querySelector('[data-testid=legend-expectations]');
            const style = legend && getComputedStyle(legend);
            return {
              labels,
              gridScrolls: document.getElementById('records').scrollWidth > wrap.clientWidth,
              actionsInView: actions.map((td) => inside(box(td), view)),
              buttonsOnTop: actions.map((td) => [...td.querySelectorAll('button')].every(onTop)),
              legend: legend && legend.textContent,
              legendNeutral: !!legend && style.color === getComputedStyle(legend.parentNode).color
                && +style.fontWeight < 600,
            };
        }"""
    )
