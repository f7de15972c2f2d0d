"""Attacks on round requests: a request may narrow what a round returns, never
widen it. Over real HTTP against the driver control endpoint of a real local Spark
application that redacts ``tailnum`` (dropped) and ``origin`` (hashed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.contract.round_request import RoundKind, RoundRequest, round_request
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.programs import compile_program, tap_view
from tests.flights_stream import (
    REDACT,
    SCHEMA,
    FlightsStream,
    start_flights_stream,
    stop_flights_stream,
)
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": REDACT,
}


@pytest.fixture(scope="module")
def driver(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with spark_conf(spark, _CONF):
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


#: Every route that takes a round's parameters: the open, the lazy trigger, and the check the
#: operator's admission webhook asks before a DataSample is stored (which must refuse what the
#: open refuses, in the same words).
_ROUTES = (
    ("POST", "/api/v1/vertices/parse/rounds"),
    ("GET", "/api/v1/vertices/parse/data-sample"),
    ("GET", "/api/v1/vertices/parse/round-check"),
)


def _refused(client: httpx.Client, params: dict[str, str], field: str, *words: str) -> None:
    for method, path in _ROUTES:
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
        # Incomplete: Spark would read the trailing word as an alias and run the shorter one.
        ("carrier = 'UA' AND", "AS AND"),
        ("carrier = 'UA' OR", "AS OR"),
        ("carrier = 'UA' AS anything", "alias"),
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


def test_a_round_check_opens_nothing_and_names_the_window_and_the_vertex(
    spark: Any, driver: httpx.Client
) -> None:
    coordinator = registry.coordinator_for(spark)
    before = set(coordinator.running_rounds())
    params = {"filter": "carrier = 'UA' AND dep_delay > 61", "columns": "carrier,dep_delay"}
    answer = driver.get("/api/v1/vertices/parse/round-check", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"accepted": True}
    assert set(coordinator.running_rounds()) <= before  # nothing opened
    too_long = driver.get(
        "/api/v1/vertices/parse/round-check", params=params | {"samplingWindow": "1h"}
    )
    assert too_long.status_code == 400, too_long.text
    assert too_long.json()["field"] == "samplingWindow"
    unknown = driver.get("/api/v1/vertices/no-such-vertex/round-check", params=params)
    assert unknown.status_code == 404, unknown.text
    assert "parse" in unknown.json()["vertices"]
    # POST is the open's verb; the check is a read and takes no POST (nothing opens by mistake).
    assert driver.post("/api/v1/vertices/parse/round-check", params=params).status_code == 405
    # Nothing opened (a round an earlier test opened may have ended meanwhile).
    assert set(coordinator.running_rounds()) <= before


#: What every refusal of an expensive filter says: the rule, besides the function.
_RULE = "cheap deterministic built-ins"


@pytest.mark.parametrize(
    ("filter_sql", "words"),
    [
        # Catastrophic backtracking: one row would hold a task thread for hours.
        ("concat(repeat('x', 20000), carrier) rlike '(x+x+)+y'", ("rlike", _RULE)),
        ("carrier rlike '(a+)+b'", ("rlike", _RULE)),
        ("carrier regexp '(a|aa)+b'", ("RLike", _RULE)),
        ("regexp_extract(carrier, '(a+)+b', 1) = ''", ("regexp_extract", _RULE)),
        # A gigabyte per row: the executor runs out of memory and the user's query fails.
        ("length(repeat(carrier, 500000000)) > 0", ("repeat", _RULE)),
        ("length(lpad(carrier, 1000000000, 'x')) > 0", ("lpad", _RULE)),
        ("sequence(1, 100000000)[0] > 0", ("sequence", _RULE)),
        ("length(space(1000000000)) > 0", ("space", _RULE)),
        # Hashing, JSON and higher-order functions are no predicates a round needs.
        ("sha2(carrier, 512) = ''", ("sha2", _RULE)),
        ("exists(array(carrier), x -> x = 'UA')", ("exists", _RULE)),
        # LIKE runs as a backtracking regular expression: several '%' apart are refused, and
        # so is a pattern that is not a string literal (it is never evaluated to find out).
        ("carrier LIKE '%a%a%a%a%a%a%b'", ("LIKE", "'%a%a%a%a%a%a%b'")),
        ("carrier ILIKE '%U%A%'", ("LIKE",)),
        ("carrier LIKE dest", ("string literal",)),
        # Nothing of a refused filter is evaluated, on the driver as on the executors: a
        # round scale is bounded (on a double each row ran BigDecimal.setScale, whose time grows
        # with the scale: minutes per row at 3e7), a LIKE pattern is a literal read as it is
        # (a constant pattern used to be evaluated while the filter compiled: 150 MB built on
        # the driver, or a scale of 4e6 run there, before anything was refused).
        ("round(dep_delay, 3000000) > 0", ("round", "integer literal within -38 to 38")),
        ("bround(dep_delay, -39) > 0", ("bround", "-38 to 38")),
        # The analyzer evaluated a scale while it resolved the call (DIVIDE_BY_ZERO then).
        ("round(dep_delay, 1/0) > 0", ("integer literal",)),
        ("round(dep_delay, length(repeat('y', 150000000))) > 0", ("integer literal",)),
        ("carrier LIKE cast(length(repeat('y', 150000000)) as string)", ("string literal",)),
        ("carrier LIKE cast(round(1.5D, 4000000) as string)", ("string literal",)),
        ("carrier LIKE cast(1/0 AS STRING)", ("string literal",)),
        # Spark's parser recurses per level: a deep filter is refused before it is parsed.
        ("(" * 2040 + "carrier = 'UA'" + ")" * 2040, ("nests 2040 levels", "at most 32")),
        ("NOT " * 40 + "carrier = 'UA'", ("nests 40 levels",)),
    ],
)
def test_an_expensive_filter_is_refused_on_the_driver_naming_the_function_and_the_rule(
    driver: httpx.Client, filter_sql: str, words: tuple[str, ...]
) -> None:
    _refused(driver, {"filter": filter_sql}, "filter", *words)


@pytest.mark.parametrize(
    "filter_sql",
    [
        "carrier = 'UA' AND dep_delay > 30 OR NOT (flight <= 10) AND flight <> 3",
        "flight + 1 - 2 * 3 / 4 % 5 > 0 AND -flight < 0 AND flight div 2 >= 0",
        "carrier LIKE 'U%' AND carrier ILIKE '%a%' AND dest LIKE 'O%D' AND dest NOT LIKE '_X_'",
        "carrier IN ('UA', 'AA') AND dep_delay IS NOT NULL AND dest IS NULL OR flight IS NULL",
        "dep_delay BETWEEN -5 AND 60 AND flight NOT BETWEEN 7 AND 9",
        "CASE WHEN dep_delay > 1 THEN true ELSE false END AND if(flight > 1, true, false)",
        "CAST(flight AS STRING) = '1' AND coalesce(dep_delay, 0) >= 0 AND nvl(dest, 'x') = 'y'",
        "lower(carrier) = 'ua' AND upper(dest) = 'ORD' AND trim(dest) = 'ORD' AND length(dest) = 3",
        "substring(dest, 1, 2) = 'OR' AND startswith(dest, 'O') AND endswith(dest, 'D') "
        "AND contains(dest, 'R') AND abs(dep_delay) > 1 AND round(dep_delay, 1) > 1",
        "year(to_date(dest)) = 2024 AND month(to_date(dest)) > 0 AND hour(TIMESTAMP"
        "'2024-01-01 03:00:00') = 3 AND dayofweek(DATE'2024-01-02') > 0",
        "round(dep_delay, 38) > 0 AND bround(dep_delay, -38) < 1 AND round(dep_delay) >= 0",
        "(((((carrier = 'UA')))))",
    ],
)
def test_cheap_filters_are_accepted(spark: Any, filter_sql: str) -> None:
    # Compiled as the driver compiles a round's filter (starting rounds over HTTP would hit
    # the limit of concurrent rounds before the filter is looked at).
    df = spark.createDataFrame([], SCHEMA)
    view = tap_view(df)
    compiled = compile_program(spark, view, filter_sql, None, None, user_filter=filter_sql)
    assert compiled.data_type.startswith("struct<carrier:string")


def test_an_expectation_name_with_a_trailing_newline_is_refused() -> None:
    # The name ends up inside a SQL string literal on the driver: the whole of it must match.
    with pytest.raises(InvalidParameterError) as refused:
        round_request(kind="violations", expectation="not-early\n")
    assert refused.value.field == "expectation"
    with pytest.raises(ValueError, match="expectation"):
        RoundRequest(kind=RoundKind.VIOLATIONS, expectation="not-early\n")
