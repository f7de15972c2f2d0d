"""Attacks on round requests (issue 16): a request may narrow what a round returns, never
widen it. Over real HTTP against the driver control endpoint of a real local Spark
application that redacts ``tailnum`` (dropped) and ``origin`` (hashed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sparkglass.runtime.sampling import registry
from tests.flights_stream import REDACT, FlightsStream, start_flights_stream, stop_flights_stream

pytestmark = pytest.mark.spark

_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": REDACT,
}


@pytest.fixture(scope="module")
def driver(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    saved = {k: spark.conf.get(k, None) for k in _CONF}
    for key, value in _CONF.items():
        spark.conf.set(key, value)
    stream: FlightsStream = start_flights_stream(
        spark, tmp_path_factory.mktemp("attack"), "attacked"
    )
    endpoint = registry.endpoint_for(spark)
    assert endpoint is not None
    with httpx.Client(
        base_url=endpoint.url, headers={"Authorization": f"Bearer {endpoint.token}"}, timeout=60
    ) as client:
        yield client
    stop_flights_stream(stream)
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _refused(client: httpx.Client, params: dict[str, str], field: str, *words: str) -> None:
    for path in ("/api/v1/vertices/parse/rounds", "/api/v1/vertices/parse/data-sample"):
        method = "POST" if path.endswith("rounds") else "GET"
        answer = client.request(method, path, params=params)
        assert answer.status_code == 400, (path, answer.text)
        body = answer.json()
        assert body["field"] == field, body
        for word in words:
            assert word in body["error"], body


@pytest.mark.parametrize(
    "filter_sql",
    [
        "tailnum = 'N14228'",  # dropped column
        "TAILNUM LIKE 'N1%'",  # case does not get around it
        "`tailnum` IS NOT NULL",
        "origin = 'EWR'",  # hashed: a filter would reveal the value one row at a time
        "substr(origin, 1, 1) = 'E'",
    ],
)
def test_filter_may_not_name_a_redacted_column(driver: httpx.Client, filter_sql: str) -> None:
    _refused(driver, {"filter": filter_sql}, "filter", "redacted")


def test_columns_may_not_bring_a_dropped_column_back(driver: httpx.Client) -> None:
    _refused(driver, {"columns": "carrier,tailnum"}, "columns", "tailnum", "redacted")


def test_a_request_cannot_name_the_runtime_columns_or_lower_redaction_by_parameter(
    driver: httpx.Client,
) -> None:
    _refused(driver, {"filter": "size(__sg_failed) >= 0"}, "filter")
    _refused(driver, {"columns": "__sg_failed"}, "columns")
    # There is no parameter that changes redaction: unknown ones are ignored, and the round
    # still returns redacted rows.
    answer = driver.post(
        "/api/v1/vertices/parse/rounds",
        params={"redact": "[]", "spark.sparkglass.sampling.redact": "[]", "columns": "carrier"},
    )
    assert answer.status_code in (200, 202), answer.text


@pytest.mark.parametrize(
    ("filter_sql", "word"),
    [
        ("carrier = 'UA') OR (true", "PARSE_SYNTAX_ERROR"),  # breaking out of the parentheses
        ("carrier = 'UA'; DROP TABLE x", "PARSE_SYNTAX_ERROR"),
        ("reflect('java.lang.System', 'exit', 0) IS NULL", "not allowed"),
        ("java_method('java.lang.Thread', 'sleep', 100000L) IS NULL", "not allowed"),
        ("EXISTS (SELECT 1)", "not allowed"),
        ("rand() < 0.5", "deterministic"),
        ("no_such_column = 1", "no_such_column"),
    ],
)
def test_filter_injection_is_refused_with_the_reason(
    driver: httpx.Client, filter_sql: str, word: str
) -> None:
    _refused(driver, {"filter": filter_sql}, "filter", word)


def test_unknown_expectation_and_kind_are_named(driver: httpx.Client) -> None:
    _refused(driver, {"kind": "violations", "expectation": "no-such"}, "expectation", "no-such")
    _refused(driver, {"kind": "everything"}, "kind", "violations")
