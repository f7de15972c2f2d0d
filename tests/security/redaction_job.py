"""A plain Structured Streaming job over CSV flights with a corrupt-record column named by
the reader option, for tests/security/test_redaction_submitted_job.py.

Like ``tests/sampling/plain_streaming_job.py`` it never uses the sparkglass DSL:
``spark-submit`` gives it the sampling jar, plugin, extension and confs (the redaction rules and
key among them, as the operator's driver gets them), and its only sparkglass line is
``sparkglass.runtime.attach``. It feeds its own input folder (``$SG_JOB_INPUT``) a small CSV file
every 0.3 s, each with a line the reader cannot parse, and prints JSON lines (``{"event": ...}``).

``$SG_JOB_MODE``: ``serve`` (default) runs the query ``flights`` (the source's ``raw_line``
renamed ``payload``) over the temporary view ``flights_in`` and serves rounds until the file
``$SG_JOB_COMMANDS`` says ``stop``; ``attach`` only calls ``attach``, once per rule set of
``$SG_JOB_ATTACH_RULES``, and reports what each raised.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import sparkglass.runtime

#: Rows of the input: carrier, flight, tailnum, origin. Tail numbers must never be sampled.
ROWS = [
    ("UA", 1545, "N14228", "EWR"),
    ("UA", 1714, "N24211", "LGA"),
    ("AA", 1141, "N619AA", "JFK"),
    ("B6", 725, "N804JB", "JFK"),
    ("DL", 461, "N668DN", "LGA"),
    ("UA", 1696, "N39463", "EWR"),
]
#: A line the CSV reader cannot parse (flight is not a number).
CORRUPT_LINE = "UA,not-a-number,N999XQ,EWR"
SCHEMA = "carrier STRING, flight INT, tailnum STRING, origin STRING, raw_line STRING"


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def feed(folder: Path, stop: threading.Event) -> None:
    for i in itertools.count():
        if stop.is_set():
            return
        lines = [",".join(str(v) for v in row) for row in ROWS] + [CORRUPT_LINE]
        staged = folder.parent / f".chunk-{i}.csv"
        staged.write_text("\n".join(lines) + "\n")
        staged.rename(folder / f"chunk-{i:05d}.csv")  # atomic: never half a file
        stop.wait(0.3)


def attach_only(spark: SparkSession) -> None:
    """One ``attach`` per rule set of ``$SG_JOB_ATTACH_RULES`` (a JSON list of rule texts),
    each after setting it as the application's redaction rules (attach reads them from the
    runtime conf; a refused attach leaves nothing behind), so one JVM judges them all."""
    for case, rules in enumerate(json.loads(os.environ["SG_JOB_ATTACH_RULES"])):
        spark.conf.set("spark.sparkglass.sampling.redact", rules)
        try:
            sparkglass.runtime.attach(spark)
        except Exception as exc:  # reported, the test judges it
            emit("attach", case=case, error=type(exc).__name__, message=str(exc))
        else:
            emit("attach", case=case, error=None, message=None)


def serve(spark: SparkSession) -> None:
    folder = Path(os.environ["SG_JOB_INPUT"])
    folder.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    threading.Thread(target=feed, args=(folder, stop), daemon=True).start()
    (
        spark.readStream.schema(SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "raw_line")
        .option("maxFilesPerTrigger", 1)
        .csv(str(folder))
        .createOrReplaceTempView("flights_in")
    )
    query = (
        spark.sql("SELECT carrier, flight, tailnum, origin, raw_line AS payload FROM flights_in")
        .writeStream.format("noop")
        .queryName("flights")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    pipeline = sparkglass.runtime.attach(spark)
    deadline = time.monotonic() + 120
    while query.lastProgress is None:
        if time.monotonic() > deadline:
            emit("error", message="no micro-batch in 120 s")
            sys.exit(1)
        time.sleep(0.1)
    from sparkglass.runtime.sampling.registry import endpoint_for

    endpoint = endpoint_for(spark)
    discovered = json.loads(str(spark._jvm.io.sparkglass.extensions.DiscoveredTaps.json()))
    emit(
        "ready",
        attached=pipeline is not None,
        url=endpoint.url if endpoint is not None else None,
        ui=spark.sparkContext.uiWebUrl,
        appId=spark.sparkContext.applicationId,
        plan=str(query._jsq.explainInternal(True)),
        taps={t["tapKey"]: t.get("corruptColumns") for t in discovered["taps"]},
    )
    commands = Path(os.environ["SG_JOB_COMMANDS"])
    while not commands.exists():
        time.sleep(0.1)
    stop.set()
    query.stop()


def main() -> None:
    spark = SparkSession.builder.getOrCreate()
    if os.environ.get("SG_JOB_MODE", "serve") == "attach":
        attach_only(spark)
    else:
        serve(spark)
    spark.stop()
    emit("stopped")


if __name__ == "__main__":
    main()
